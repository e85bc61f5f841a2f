"""The GPT-style model of train.py, sharded in HSDP's layout, repairing itself in place: a lost rank's shard
comes back from its replica in another group's memory, not from a checkpoint, and the survivors never stop.
Checkpoints (DCP, every ``--checkpoint-every`` steps) are for what memory cannot repair: a shard lost with every
copy of it restarts the group, which resumes from the newest one.

    torchjob run examples/gpt/job-inplace.yaml    # 4 ranks (2 replica groups × 2), a spare

Added to the job file's ``args``: ``--replicas 1`` for plain FSDP over the 4 (neighbours keep copies), ``--ddp`` for
DDP (the whole model on every rank), ``--size tiny`` for the same code in seconds.

The loop runs under ``InPlaceTraining.sharded``: when a rank dies, a warm spare takes its rank, receives its
shard of the weights and of AdamW's state from the survivor holding the same shard (``--replicas 1``: plain FSDP,
from the neighbour keeping a copy of it), and the group retries the step that failed. With ``--ddp`` nothing is
sharded: every rank holds the whole model (DDP), and a spare receives it from every survivor at once. Each step's
sequences depend only on the step and the rank, so a repaired run ends with the model of a run without a fault. A
checkpoint is taken between steps, by every member of the group as it stands, and written in the background: a
rank lost while one is written leaves that checkpoint uncommitted (the one before stays the newest), and the
repaired group takes the next.
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
from torch import nn
from torch.distributed.tensor import DTensor

from torchjob.train import DistContext, MetricsLogger, init, shutdown
from torchjob.train.in_place import InPlaceTraining
from torchjob.train.sharded_checkpoint import ShardedCheckpointer


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="100m")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=4, help="sequences per rank and step")
    p.add_argument("--length", type=int, help="tokens per sequence; default: the model's context")
    p.add_argument("--lr", type=float, help="AdamW's learning rate; default: the size's")
    p.add_argument(
        "--replicas",
        type=int,
        default=2,
        help="HSDP replica groups; 1: plain FSDP, each rank's shard copied to its neighbour's memory after each step",
    )
    p.add_argument(
        "--ddp",
        action="store_true",
        help="no sharding: the whole model and AdamW's state on every rank (DDP), a spare's from every survivor",
    )
    p.add_argument(
        "--copy-every",
        type=int,
        default=1,
        help="plain FSDP: 1, each neighbour's copy stepped with the rank's gradients; N > 1, sent whole every N steps "
        "(a repair goes back to it)",
    )
    add_reshard_flag(p)
    output = os.environ.get("TORCHJOB_OUTPUT_DIR", "output")
    p.add_argument("--checkpoint-dir", default=os.path.join(output, "checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=50, help="0: none")
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--output-dir", default=output)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    config = SIZES[args.size]

    def build() -> nn.Module:
        torch.manual_seed(0)  # every rank builds the same initial weights (FSDP2 does not broadcast)
        return GPT(config)

    def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=args.lr or config.learning_rate)

    # Under DDP the model is built before init(): a warm spare builds it while it waits, not once it has a place.
    whole = build() if args.ddp else None
    ctx = init()  # a warm spare waits in here until it is given a lost rank's place
    if whole is not None:
        trainer = InPlaceTraining(ctx, whole, make_optimizer(whole))
        layout = f"on each of {ctx.world_size} ranks (DDP)"
    else:
        trainer = InPlaceTraining.sharded(
            ctx,
            build,
            make_optimizer,
            replicas=args.replicas,
            units=GPT.units,  # type: ignore[arg-type]
            copy_every=args.copy_every,
            reshard_after_forward=reshard_after_forward(args),
        )
        kind = f"in {args.replicas} replica groups (HSDP)" if args.replicas > 1 else "(FSDP, neighbours' copies)"
        layout = f"sharded over {ctx.world_size} ranks {kind}"
    count = sum(p.numel() for p in trainer.model.parameters())
    ctx.log(
        f"{count / 1e6:.1f}M parameters, {layout}, repaired in place; "
        f"{args.batch_size} × {args.length or config.context} tokens per rank and step"
    )
    # Asynchronous saves: a save in flight when the group is repaired is left unfinished, and the next one is made
    # by the repaired group (sharded_checkpoint.py).
    checkpoints = ShardedCheckpointer(args.checkpoint_dir, ctx, keep=2, async_save=True)
    start = 0
    if not ctx.joined:  # a joiner's state comes from its peers' memory; a new group's from the newest checkpoint
        manifest = checkpoints.load(trainer.model, trainer.optimizer)
        start = int(manifest["step"]) if manifest else 0
        if manifest:
            ctx.log(f"resumed from the checkpoint of step {start} (saved by {manifest['world_size']} ranks)")
    language = Language(config)
    metrics = MetricsLogger(trainer.ctx, total_steps=args.steps)
    losses: list[float] = []

    def step(model: nn.Module, number: int, ctx: DistContext) -> None:
        began = time.perf_counter()
        tokens, targets = language.batch(args.batch_size, number + 1, ctx.rank, args.length)
        optimizer = trainer.optimizer
        optimizer.zero_grad()
        loss = model(tokens.to(ctx.device), targets.to(ctx.device))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        metrics.step(number + 1, 1, losses[-1], args.batch_size, time.perf_counter() - began)
        if (number + 1) % args.log_interval == 0 or number + 1 == args.steps:
            ctx.log(f"step {number + 1}/{args.steps}: loss {losses[-1]:.3f} (floor {floor_loss():.3f})")

    def between_steps(done: int) -> None:
        if args.checkpoint_every and done % args.checkpoint_every == 0:
            checkpoints.save(done, trainer.model, trainer.optimizer)

    started = time.time()
    trainer.run(step, args.steps, start_step=start, between_steps=between_steps)
    checkpoints.wait()
    metrics.close()
    # Every rank takes part in gathering the full weights; the sum tells two runs' models apart.
    checksum = sum(float(whole_tensor(p).double().sum()) for p in trainer.model.parameters())
    if trainer.ctx.is_main:
        os.makedirs(args.output_dir, exist_ok=True)
        summary = {
            "parameters": count,
            "world_size": trainer.ctx.world_size,
            "first_loss": losses[0] if losses else math.nan,
            "last_loss": losses[-1] if losses else math.nan,
            "repairs": trainer.repairs,
            "resumed_from": start,
            "checksum": checksum,
            "train_seconds": time.time() - started,
        }
        with open(os.path.join(args.output_dir, "metrics.json"), "w") as out:
            json.dump(summary, out)
    print(f"Rank {trainer.ctx.rank}: training completed.", flush=True)
    shutdown(exit_code=0)


def whole_tensor(param: torch.Tensor) -> torch.Tensor:
    """A parameter's full value: gathered from every rank where it is sharded (a DTensor), as it is under DDP."""
    found = param.detach()
    return found.full_tensor() if isinstance(found, DTensor) else found


if __name__ == "__main__":
    main()
