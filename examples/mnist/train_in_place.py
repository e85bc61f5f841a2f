"""Distributed MNIST that survives the loss of a rank without restarting the others (in-place repair).

The training loop runs under :class:`torchjob.train.in_place.InPlaceTraining`: when a peer dies, the
survivors keep their processes (torch imported, model and optimizer in memory), a warm spare takes the lost
rank's place with the state broadcast from a survivor, and training goes on from the step that failed. The
job asks for the spare with the ``torchjob.io/spares`` annotation (see job-inplace.yaml).

Each step's samples depend only on the step, the rank and the world size (a fixed global batch, strong
scaling, over a per-epoch permutation), so a repaired group retries the failed step with the same samples,
and no sample is trained twice or skipped.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F
from mnist_data import load
from model import Net, evaluate, save_results, to_dataset
from torch import nn

from torchjob.train import DistContext, MetricsLogger, init, shutdown
from torchjob.train.in_place import InPlaceTraining


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--global-batch", type=int, default=96, help="samples per step across all ranks")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-interval", type=int, default=20, help="steps between progress lines")
    p.add_argument("--data", default=os.environ.get("MNIST_DATA", ""), help="MNIST IDX files; default: bundled")
    p.add_argument("--model-dir", default=os.environ.get("TORCHJOB_OUTPUT_DIR", "output"))
    return p.parse_args()


def main() -> None:
    args = parse_args()
    # Whatever does not depend on the rank is made before init(): a warm spare then has it ready when it is
    # given a place, and the survivors, who wait for it in the state's broadcast, do not wait for its set-up too.
    torch.manual_seed(args.seed)
    train_images, train_labels, test_images, test_labels = load(args.data)
    images, labels = to_dataset(train_images, train_labels).tensors
    steps_per_epoch = len(labels) // args.global_batch
    total_steps = steps_per_epoch * args.epochs
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    orders = [
        torch.randperm(len(labels), generator=torch.Generator().manual_seed(args.seed + e)) for e in range(args.epochs)
    ]
    ctx = init()  # a warm spare waits in here until it is given a lost rank's place
    trainer = InPlaceTraining(ctx, model, optimizer)
    # Progress (status.trainerStatus, the Progress column) and the heartbeat a progress deadline watches.
    progress = MetricsLogger(trainer.ctx, total_steps=total_steps)

    def step(ddp: nn.Module, number: int, ctx: DistContext) -> None:
        epoch, within = divmod(number, steps_per_epoch)
        chosen = orders[epoch][within * args.global_batch : (within + 1) * args.global_batch][
            ctx.rank :: ctx.world_size
        ]
        started = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(ddp(images[chosen]), labels[chosen])
        loss.backward()
        optimizer.step()
        progress.step(number + 1, epoch + 1, loss.item(), len(chosen), time.perf_counter() - started)
        if (within + 1) % args.log_interval == 0 or within + 1 == steps_per_epoch:
            print(
                f"Rank {ctx.rank}: epoch: {epoch + 1}/{args.epochs}, batch: {within + 1}/{steps_per_epoch}, "
                f"mini-batch size: {len(chosen)}, loss={loss.item():.4f}",
                flush=True,
            )

    started = time.time()
    trainer.run(step, total_steps)
    progress.close()
    elapsed = time.time() - started
    if trainer.ctx.is_main:
        accuracy = evaluate(model, to_dataset(test_images, test_labels), ctx.device)
        print(f"Rank 0: test accuracy={accuracy:.4f} on {len(test_labels)} held-out digits", flush=True)
        metrics = {"accuracy": accuracy, "world_size": trainer.ctx.world_size, "repairs": trainer.repairs}
        save_results(model, args.model_dir, {**metrics, "epochs": args.epochs, "train_seconds": elapsed})
    print(f"Rank {trainer.ctx.rank}: training completed.", flush=True)
    shutdown(exit_code=0)


if __name__ == "__main__":
    main()
