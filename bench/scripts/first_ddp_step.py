"""Benchmark payload: join the gloo group, wrap a tiny model in DDP, complete one training step (its gradients
all-reduced), record when (time.time()) per rank. DDP's constructor imports torch._dynamo, as every DDP script's
does: the part of a real launch that the first-collective payload leaves out."""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
model = DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.ones(4, 8)).sum().backward()
optimizer.step()
done = time.time()
with open(os.path.join(os.environ["BENCH_OUT"], f"rank-{dist.get_rank()}.txt"), "w") as f:
    f.write(repr(done))
dist.destroy_process_group()
