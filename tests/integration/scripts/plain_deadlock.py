"""A plain DDP loop that never imports torchjob; on its first run one rank stops between collectives.

That rank stays alive (it sleeps, so its process beats), and the others wait for it in the next all-reduce:
nobody progresses, everyone is alive (a deadlock). ``--marker`` names a file that says the first run is over;
without it, the first run is attempt 0 (``TORCHJOB_ATTEMPT``, which torchjob sets in a Pod as locally).
``--linger-rank`` stays alive (beating) for ``--linger-seconds`` after training, while the others exit.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--stop-rank", type=int, default=1)
p.add_argument("--stop-step", type=int, default=30)
p.add_argument("--marker")
p.add_argument("--linger-rank", type=int, default=-1)
p.add_argument("--linger-seconds", type=float, default=0.0)
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DistributedDataParallel(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
first_run = not os.path.exists(args.marker) if args.marker else os.environ.get("TORCHJOB_ATTEMPT") == "0"
for step in range(1, args.steps + 1):
    optimizer.zero_grad()
    model(torch.randn(2, 4)).pow(2).mean().backward()
    optimizer.step()
    if first_run and rank == args.stop_rank and step == args.stop_step:
        if args.marker:
            open(args.marker, "w").close()
        print(f"rank {rank}: stopping after step {step}", flush=True)
        time.sleep(3600)
    time.sleep(0.05)
print(f"rank {rank}: done", flush=True)
dist.destroy_process_group()
if rank == args.linger_rank:
    time.sleep(args.linger_seconds)
sys.exit(0)
