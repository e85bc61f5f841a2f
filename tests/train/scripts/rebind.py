"""A sharded model (FSDP2, or HSDP with --replicas) moved onto a new group (torchjob.train.sharded_rebind): train,
fail a step mid-forward on every rank, let go of the group, form another, move the model onto it, and train on.
An asynchronous DCP save of step 2 is made (and committed) before: its staging buffers, kept for the next save,
must not hold the group either. Prints whether the old group was freed once left (by reference counting alone:
nothing may hold it) and the whole model's checksum, which must be an uninterrupted run's (--straight).

Four ranks; rank 0 hosts the store."""

import argparse
import contextlib
import gc
import os
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from torchjob.train import fsdp, sharded_rebind
from torchjob.train.context import DistContext
from torchjob.train.ddp import checksum
from torchjob.train.sharded_checkpoint import ShardedCheckpointer

parser = argparse.ArgumentParser()
parser.add_argument("--replicas", type=int, default=1)
parser.add_argument("--straight", action="store_true", help="no re-form: the run to compare with")
parser.add_argument("--checkpoints", required=True, help="where the asynchronous saves go")
args = parser.parse_args()
rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
store = dist.TCPStore("127.0.0.1", port, 4, rank == 0, timeout=timedelta(seconds=60))
ctx = DistContext(rank, rank, 4, torch.device("cpu"), "gloo", "test")


def form(generation: int) -> object:
    dist.init_process_group("gloo", store=dist.PrefixStore(f"g{generation}", store), rank=rank, world_size=4)  # type: ignore[attr-defined]
    return fsdp.mesh_for(ctx, args.replicas)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
mesh = form(0)
fsdp.shard_on(model, mesh, [model[0], model[2], model[4]])
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)


class Failed(RuntimeError):
    pass


def fail(*_: object) -> None:
    raise Failed("a collective failed")


def step(number: int, failing: bool = False) -> None:
    generator = torch.Generator().manual_seed(number)
    x, y = torch.randn(32, 16, generator=generator), torch.randn(32, 1, generator=generator)
    optimizer.zero_grad()
    hook = model[2].register_forward_pre_hook(fail) if failing else None  # after the first unit's gather
    try:
        nn.functional.mse_loss(model(x), y).backward()
    finally:
        if hook is not None:
            hook.remove()
    optimizer.step()


for number in (1, 2):
    step(number)
checkpoints = ShardedCheckpointer(args.checkpoints, ctx, async_save=True)
checkpoints.save(2, model, optimizer)
checkpoints.wait()
if not args.straight:
    with contextlib.suppress(Failed):
        step(3, failing=True)
    print(f"LET GO {sharded_rebind.let_go(model, mesh)}", flush=True)
    old = weakref.ref(dist.distributed_c10d._get_default_group())
    gc.disable()  # freed by reference counting, or not at all
    dist.destroy_process_group()
    print(f"OLD GROUP FREED {old() is None}", flush=True)
    gc.enable()
    print(f"MOVED {sharded_rebind.rebind(model, mesh, form(1))}", flush=True)
for number in (3, 4):
    step(number)
checkpoints.save(4, model, optimizer)  # by the new group, into the same buffers
checkpoints.wait()
print(f"CHECKSUM {checksum(model).tolist()}", flush=True)
dist.barrier()
dist.destroy_process_group()
