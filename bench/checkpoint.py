"""Checkpoint overhead: training throughput while checkpointing every N steps, sync and async, divided by
the throughput of the same loop without checkpoints, in the same run. Target: async ≥ 0.97.

One process, a 6.3M-parameter MLP (75 MB checkpoints with Adam's state) on synthetic data, saving to a
local folder (written, fsynced and renamed, as in real use). This machine's speed drifts by more than the
effect between runs of a few seconds, so the three modes are interleaved inside one training loop, in
blocks of N steps cycling none → sync → async: a sync block starts with a save; an async block starts one
and waits for it at the end of the block, so every block pays for its own checkpoint in full.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.records import Run

EVERY = 25


def record(run: Run, blocks: int) -> None:
    """Seconds per block of ``EVERY`` steps in each mode (every block a sample), and the checkpoint's size."""
    import torch
    from torch import nn

    from torchjob.train import Checkpointer, DistContext

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    ctx = DistContext(0, 0, 1, torch.device("cpu"), "gloo", "single")
    x, y = torch.randn(64, 1024), torch.randint(0, 10, (64,))
    directory = Path(tempfile.mkdtemp(prefix="bench-ckpt-"))
    checkpointers = {
        "sync": Checkpointer(directory / "sync", ctx, keep=2),
        "async": Checkpointer(directory / "async", ctx, keep=2, async_save=True),
    }

    def train(steps: int) -> None:
        for _ in range(steps):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
            optimizer.step()

    seconds: dict[str, list[float]] = {"none": [], "sync": [], "async": []}
    try:
        train(EVERY)  # warm-up
        step = 0
        for _ in range(blocks):
            for mode in seconds:
                started = time.perf_counter()
                step += EVERY
                if mode != "none":
                    checkpointers[mode].save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, step)
                train(EVERY)
                if mode == "async":
                    checkpointers[mode].wait()
                seconds[mode].append(time.perf_counter() - started)
        size = max(f.stat().st_size / 1e6 for f in directory.glob("*/ckpt-*.pt"))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    for mode, values in seconds.items():
        run.add(f"{mode} block", list(values))
    run.add("checkpoint size", [size], "MB")
