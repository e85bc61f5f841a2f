"""A GPT-style language model trained sharded (FSDP2 over every rank, or HSDP with --replicas), with DCP
checkpoints: what a model that no longer fits one device looks like under torchjob.

    torchjob run examples/gpt/job.yaml    # 4 ranks, the ~110M-parameter model (``--size tiny`` in the job
                                          # file's args: the same code in seconds)

Each rank trains on its own generated sequences (``model.Language``); the loss falls from ln(vocabulary)
towards ln(4). Checkpoints go to ``--checkpoint-dir`` (a folder, a volume or ``s3://...``) every
``--checkpoint-every`` steps, asynchronously, and a restarted group resumes from the newest one, whatever its
number of ranks was.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch
from model import GPT, SIZES, Language, floor_loss
from sharding_flags import add_reshard_flag, reshard_after_forward

from torchjob.train import MetricsLogger, SyncCheck, build_sharded, init, shutdown
from torchjob.train.sharded_checkpoint import ShardedCheckpointer


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="100m")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=4, help="sequences per rank and step")
    p.add_argument("--length", type=int, help="tokens per sequence; default: the model's context")
    p.add_argument("--lr", type=float, help="AdamW's learning rate; default: the size's")
    p.add_argument("--replicas", type=int, default=1, help="HSDP replica groups (1: FSDP over every rank)")
    add_reshard_flag(p)
    output = os.environ.get("TORCHJOB_OUTPUT_DIR", "output")
    p.add_argument("--checkpoint-dir", default=os.path.join(output, "checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument(
        "--sync-checkpoints",
        action="store_true",
        help="training waits for each save; an asynchronous one (the default) first copies the state in memory, "
        "which the 1b size on 4 ranks of a 24 GB machine has no room for",
    )
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--output-dir", default=output)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    ctx = init()
    config = SIZES[args.size]

    def build() -> GPT:
        torch.manual_seed(0)  # FSDP2 does not broadcast: every rank builds the same initial weights
        return GPT(config)

    checkpoints = ShardedCheckpointer(args.checkpoint_dir, ctx, keep=2, async_save=not args.sync_checkpoints)
    # Built on the meta device and filled block by block, each block sharded before the next is filled: no rank
    # ever holds the whole model (4 ranks of the 1b size would hold 16 GB before sharding). Where a checkpoint will
    # be loaded into it, it is left unfilled.
    model = build_sharded(
        build,
        ctx,
        replicas=args.replicas,
        units=GPT.units,  # type: ignore[arg-type]
        reshard_after_forward=reshard_after_forward(args),
        initialise=checkpoints.newest() is None,
    )
    count = sum(p.numel() for p in model.parameters())  # the DTensors' global sizes
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr or config.learning_rate)
    language = Language(config)
    ctx.log(
        f"{count / 1e6:.1f}M parameters, sharded over {ctx.world_size} ranks"
        + (f" in {args.replicas} replica groups (HSDP)" if args.replicas > 1 else " (FSDP2)")
        + f"; {args.batch_size} × {args.length or config.context} tokens per rank and step"
    )
    manifest = checkpoints.load(model, optimizer)
    start = int(manifest["step"]) if manifest else 0
    if manifest:
        ctx.log(f"resumed from the checkpoint of step {start} (saved by {manifest['world_size']} ranks)")
    metrics = MetricsLogger(ctx, total_steps=args.steps)
    sync = SyncCheck(model, ctx)
    first_loss = last_loss = math.nan
    started = time.time()
    for step in range(start + 1, args.steps + 1):
        began = time.perf_counter()
        tokens, targets = language.batch(args.batch_size, step, ctx.rank, args.length)
        optimizer.zero_grad()
        loss = model(tokens.to(ctx.device), targets.to(ctx.device))
        loss.backward()
        optimizer.step()
        sync.after_step(step - start)
        last_loss = loss.item()
        first_loss = last_loss if math.isnan(first_loss) else first_loss
        saved = 0.0
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            save_began = time.perf_counter()
            checkpoints.save(step, model, optimizer)
            saved = time.perf_counter() - save_began
        metrics.step(step, 1, last_loss, args.batch_size, time.perf_counter() - began, saved)
        if step % args.log_interval == 0 or step == args.steps:
            ctx.log(f"step {step}/{args.steps}: loss {last_loss:.3f} (floor {floor_loss():.3f})")
    checkpoints.wait()
    metrics.close()
    if ctx.is_main:
        os.makedirs(args.output_dir, exist_ok=True)
        summary = {
            "parameters": count,
            "world_size": ctx.world_size,
            "first_loss": first_loss,
            "last_loss": last_loss,
            "resumed_from": start,
            "train_seconds": time.time() - started,
        }
        with open(os.path.join(args.output_dir, "metrics.json"), "w") as out:
            json.dump(summary, out)
    print(f"Rank {ctx.rank}: training completed.", flush=True)
    shutdown(exit_code=0)


if __name__ == "__main__":
    main()
