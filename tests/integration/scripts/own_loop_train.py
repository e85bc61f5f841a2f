"""A script that forms its group with torchjob.train but trains in its own loop, without MetricsLogger: its
steps are reported by torchjob.autoreport's optimizer hook, in every process of a replica of several (the
other local ranks are forked by ``torchjob.train.init``, after the reporter started)."""

import os
import time

import torch
from torch.nn.parallel import DistributedDataParallel

import torchjob.train as tt

ctx = tt.init(timeout_seconds=300)
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(int(os.environ.get("STEPS", "60"))):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    time.sleep(0.05)  # steps for a few seconds: the reporter beats once a second
ctx.log(f"done as local rank {os.environ['LOCAL_RANK']}")
tt.shutdown(exit_code=0)
