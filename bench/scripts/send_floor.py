"""Benchmark payload: the floor under sending a lost rank's state here. Two ranks (gloo, loopback, this machine's
cores): rank 1 sends rank 0 one fp32 tensor of ``bytes`` (a lost shard's weights and AdamW's moments), ``trials``
times; rank 0 times each from its receive's start to its end, both ranks having met at a barrier first, and writes
them as JSON lines to ``$BENCH_OUT/floor.jsonl``. One tensor in one message: no repair can send the same bytes
faster over the same transport."""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from torchjob.train import init, shutdown

size, trials = int(float(sys.argv[1])), int(sys.argv[2])
out = Path(os.environ["BENCH_OUT"])
ctx = init()
payload = torch.ones(size // 4, dtype=torch.float32)  # touched: no page is first faulted in during the send
for _ in range(trials):
    dist.barrier()
    began = time.perf_counter()
    if ctx.rank == 1:
        dist.send(payload, dst=0)
    else:
        dist.recv(payload, src=1)
        with (out / "floor.jsonl").open("a") as found:
            found.write(json.dumps({"seconds": time.perf_counter() - began, "bytes": size}) + "\n")
shutdown(exit_code=0)
