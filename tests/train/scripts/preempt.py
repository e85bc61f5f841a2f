"""Trains until SIGTERM, then saves a final checkpoint at the same step on every rank and exits 143."""

import sys
import time

import torch
from torch import nn

from torchjob.train import Checkpointer, init, wrap

ctx = init()
torch.manual_seed(0)
model = wrap(nn.Linear(4, 1), ctx)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
ckpt = Checkpointer(sys.argv[1], ctx)
ckpt.handle_preemption()
step = 0
while True:
    step += 1
    optimizer.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    print(f"rank {ctx.rank}: step {step}", flush=True)
    if ckpt.preempted():
        ckpt.exit_preempted({"model": model.module.state_dict(), "step": step}, step)
    time.sleep(0.05)
