"""Distributed MNIST on torchjob.train: the DDP plumbing comes from the library, the log lines stay the same.

Compared with train_plain.py (the hand-written Kubeflow-style version), this script also:
- says what the batch size and learning rate really are across ranks (``--scaling strong|weak``);
- proves after the first step that every rank holds the same model (SyncCheck);
- checkpoints every ``--checkpoint-every`` steps and resumes from the newest good checkpoint when the group
  is restarted, mid-epoch included; on SIGTERM it saves and exits so the replica is retried;
- writes per-rank metrics (``torchjob metrics NAME``) and the heartbeat hang detection reads.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

import torch
import torch.nn.functional as F
from mnist_data import load
from model import Net, evaluate, save_results, to_dataset

from torchjob.train import BatchPlan, Checkpointer, MetricsLogger, SyncCheck, init, shard, shutdown, wrap


def parse_args() -> argparse.Namespace:
    output = os.environ.get("TORCHJOB_OUTPUT_DIR", "output")
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="per rank (weak scaling) or global (strong)")
    p.add_argument("--scaling", choices=("weak", "strong"), default="weak")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--scale-lr", action="store_true", help="linear learning-rate scaling with the effective batch")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-interval", type=int, default=20, help="batches between progress lines")
    p.add_argument(
        "--data",
        default=os.environ.get("MNIST_DATA", ""),
        help="folder or URL with the MNIST IDX files; default: 5,000 digits shipped offline",
    )
    p.add_argument("--model-dir", default=output)
    p.add_argument(
        "--checkpoint-dir",
        default=os.path.join(output, "checkpoints"),
        help="a folder or a URL such as s3://bucket/run",
    )
    p.add_argument("--checkpoint-every", type=int, default=40, help="steps between checkpoints (0: never)")
    p.add_argument("--async-checkpoint", action="store_true")
    p.add_argument("--backend", default=None, help="default: nccl with GPUs, else gloo")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    ctx = init(backend=args.backend)
    rank = ctx.rank
    torch.manual_seed(args.seed)

    train_images, train_labels, test_images, test_labels = load(args.data)
    plan = BatchPlan.create(args.scaling, args.batch_size, ctx.world_size, args.lr, scale_lr=args.scale_lr)
    ctx.log(f"{ctx.world_size} ranks, {ctx.backend} on {ctx.device}")
    ctx.log(plan.describe())
    loader = shard(to_dataset(train_images, train_labels), plan, ctx, seed=args.seed)
    sampler = loader.sampler
    batches_per_epoch = math.ceil(sampler.num_samples / plan.per_rank_batch)  # type: ignore[attr-defined]

    model = wrap(Net(), ctx)
    optimizer = torch.optim.Adam(model.parameters(), lr=plan.learning_rate)
    sync = SyncCheck(model, ctx)
    ckpt = Checkpointer(
        args.checkpoint_dir, ctx, every_steps=args.checkpoint_every or None, async_save=args.async_checkpoint
    )
    ckpt.handle_preemption()
    metrics = MetricsLogger(ctx, total_steps=batches_per_epoch * args.epochs)

    step, start_epoch, done_in_epoch = 0, 1, 0
    state = ckpt.load()
    if state is not None:
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, start_epoch, done_in_epoch = state["step"], state["epoch"], state["batches_done"]
        sampler.load_state_dict({"epoch": start_epoch, "taken": done_in_epoch * plan.per_rank_batch})  # type: ignore[attr-defined]
        ckpt.restore_rng(state)
        ctx.log(f"resumed from the checkpoint of step {step} (epoch {start_epoch}, batch {done_in_epoch})")

    def snapshot(epoch: int, batches_done: int) -> dict[str, Any]:
        return {
            "model": model.module.state_dict(),
            "optimizer": optimizer.state_dict(),
            "epoch": epoch,
            "batches_done": batches_done,
        }

    started, samples = time.time(), 0
    for epoch in range(start_epoch, args.epochs + 1):
        sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        first = done_in_epoch if epoch == start_epoch else 0
        model.train()
        total_loss, batches = 0.0, 0
        for batch, (x, y) in enumerate(loader, start=first + 1):
            step_started = time.perf_counter()
            x, y = x.to(ctx.device), y.to(ctx.device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            sync.after_step(step)
            total_loss += loss.item()
            batches += 1
            samples += x.size(0)
            saved = 0.0
            if ckpt.due(step):
                ckpt.save(snapshot(epoch, batch), step)
                saved = ckpt.last_save_seconds
            metrics.step(step, epoch, loss.item(), x.size(0), time.perf_counter() - step_started, saved)
            if batch % args.log_interval == 0 or batch == batches_per_epoch:
                print(
                    f"Rank {rank}: epoch: {epoch}/{args.epochs}, batch: {batch}/{batches_per_epoch}, "
                    f"mini-batch size: {x.size(0)}",
                    flush=True,
                )
            if ckpt.preempted():
                ckpt.exit_preempted(snapshot(epoch, batch), step)
        print(
            f"Rank {rank}: epoch {epoch}/{args.epochs}, average epoch loss={total_loss / max(batches, 1):.4f}",
            flush=True,
        )
    elapsed = time.time() - started
    ckpt.wait()
    metrics.close()

    if ctx.is_main:
        accuracy = evaluate(model.module, to_dataset(test_images, test_labels), ctx.device)
        print(f"Rank 0: test accuracy={accuracy:.4f} on {len(test_labels)} held-out digits", flush=True)
        save_results(
            model.module,
            args.model_dir,
            {
                "accuracy": accuracy,
                "world_size": ctx.world_size,
                "epochs": args.epochs,
                "effective_batch": plan.effective_batch,
                "samples_per_second_rank0": samples / elapsed,
                "train_seconds": elapsed,
            },
        )
    print(f"Rank {rank}: training completed.", flush=True)
    shutdown(exit_code=0)


if __name__ == "__main__":
    main()
