"""Benchmark payload for recovery time: a small DDP loop that records when its first step completes.

Each (re)start writes ``first-step-<generation>-rank<r>.txt`` (time.time()) into BENCH_OUT after its first
completed training step; the generation is TORCHELASTIC_RESTART_COUNT under torchrun (including torchjob's
elastic jobs, whose agents re-form the group in place), else TORCHJOB_ATTEMPT.
"""

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

generation = os.environ.get("TORCHELASTIC_RESTART_COUNT") or os.environ.get("TORCHJOB_ATTEMPT", "0")
dist.init_process_group("gloo")
rank = dist.get_rank()
with open(os.path.join(os.environ["BENCH_OUT"], f"pid-{generation}-rank{rank}.txt"), "w") as f:
    f.write(str(os.getpid()))
model = DistributedDataParallel(nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 100_000):
    optimizer.zero_grad()
    model(torch.randn(8, 32)).sum().backward()
    optimizer.step()
    if step == 1:
        with open(os.path.join(os.environ["BENCH_OUT"], f"first-step-{generation}-rank{rank}.txt"), "w") as f:
            f.write(repr(time.time()))
    time.sleep(0.02)
