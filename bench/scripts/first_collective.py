"""Benchmark payload: join the gloo group, complete one all_reduce, record when (time.time()) per rank."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.ones(1)
dist.all_reduce(value)
done = time.time()
with open(os.path.join(os.environ["BENCH_OUT"], f"rank-{dist.get_rank()}.txt"), "w") as f:
    f.write(repr(done))
dist.destroy_process_group()
