"""A re-formed DDP group's joiners get the whole state from every survivor at once (group_state.ReplicatedState).

Four ranks, each training the same small model with Adam and a learning-rate schedule. Ranks 0 and 1 train 3
steps; rank 3 trains 4 (a step ahead of the group); rank 2 is a joiner (built from another seed, no step, the
first learning rate). After ``restore``, every rank prints a digest of its model's weights, its optimizer's state
and its learning rate, and the step the group carries on from: ``STATE <rank> <step> <digest>``; rank 0 also
prints where each joiner's state came from: ``SAID <text>``."""

import hashlib
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from torchjob.train.context import DistContext
from torchjob.train.group_state import ReplicatedState

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), world, rank == 0, timeout=timedelta(seconds=60))
dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60))
torch.manual_seed(0 if rank != 2 else 1)
model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
steps = {0: 3, 1: 3, 2: 0, 3: 4}[rank]
for number in range(steps):
    generator = torch.Generator().manual_seed(number)
    optimizer.zero_grad()
    model(torch.randn(4, 8, generator=generator)).sum().backward()
    optimizer.step()
    schedule.step()
ctx = DistContext(rank, rank, world, torch.device("cpu"), "gloo", "test", generation=1, joined=rank == 2, holder=0)
state = ReplicatedState(model, optimizer, {})
restored = state.restore(ctx, has_state=rank != 2, step=steps)
digest = hashlib.sha256()
for tensor in model.state_dict().values():
    digest.update(tensor.numpy().tobytes())
for name, values in sorted(optimizer.state_dict()["state"].items()):
    for key in sorted(values):
        digest.update(f"{name}.{key}".encode() + values[key].numpy().tobytes())
digest.update(repr([group["lr"] for group in optimizer.param_groups]).encode())
print(f"STATE {rank} {restored.step} {digest.hexdigest()}", flush=True)
if rank == restored.reporter:
    print(f"SAID {restored.source}", flush=True)
# One more step together: the new DDP works, and every rank ends where the others do.
restored.module(torch.randn(4, 8, generator=torch.Generator().manual_seed(9))).sum().backward()
optimizer.step()
print(f"AFTER {rank} {float(sum(p.sum() for p in model.parameters())):.9f}", flush=True)
dist.destroy_process_group()
