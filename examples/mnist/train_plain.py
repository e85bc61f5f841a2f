"""Distributed MNIST training with DDP, written the way a Kubeflow PyTorchJob user writes it — no torchjob code.

The launcher (torchjob, Kubeflow's operator, or torchrun) sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and
RANK; ``init_process_group()`` reads them. Each rank trains on its shard (DistributedSampler), gradients
are averaged by DDP, and rank 0 evaluates on held-out digits and saves the model.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from mnist_data import load
from model import Net, evaluate, save_results, to_dataset
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-interval", type=int, default=20, help="batches between progress lines")
    p.add_argument(
        "--data",
        default=os.environ.get("MNIST_DATA", ""),
        help="folder or URL with the MNIST IDX files; default: 5,000 digits shipped offline",
    )
    p.add_argument("--model-dir", default=os.environ.get("TORCHJOB_OUTPUT_DIR", "output"))
    p.add_argument("--backend", default="gloo")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    dist.init_process_group(backend=args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    train_images, train_labels, test_images, test_labels = load(args.data)
    train_set = to_dataset(train_images, train_labels)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    model = DDP(Net())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    print(
        f"Rank {rank}: world size {world}, {len(sampler)} samples per rank, "
        f"mini-batch size {args.batch_size}, effective batch {args.batch_size * world}",
        flush=True,
    )

    started = time.time()
    samples = 0
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        total_loss, batches = 0.0, 0
        for batch, (x, y) in enumerate(loader, start=1):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            batches += 1
            samples += x.size(0)
            if batch % args.log_interval == 0 or batch == len(loader):
                print(
                    f"Rank {rank}: epoch: {epoch}/{args.epochs}, batch: {batch}/{len(loader)}, "
                    f"mini-batch size: {x.size(0)}",
                    flush=True,
                )
        print(
            f"Rank {rank}: epoch {epoch}/{args.epochs}, average epoch loss={total_loss / batches:.4f}",
            flush=True,
        )
    elapsed = time.time() - started

    if rank == 0:
        accuracy = evaluate(model.module, to_dataset(test_images, test_labels))
        print(f"Rank 0: test accuracy={accuracy:.4f} on {len(test_labels)} held-out digits", flush=True)
        save_results(
            model.module,
            args.model_dir,
            {
                "accuracy": accuracy,
                "world_size": world,
                "epochs": args.epochs,
                "samples_per_second_rank0": samples / elapsed,
                "train_seconds": elapsed,
            },
        )
    print(f"Rank {rank}: training completed.", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
