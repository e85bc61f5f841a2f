"""A sharded model (FSDP2, or HSDP with --replicas) in a real gloo group: train, check that every replica holds
one model, save a DCP checkpoint, load one (saved by any number of ranks), and print the whole model's checksum.

Every rank trains on the same full batch, so the averaged gradient, and so the result, does not depend on the
number of ranks: a checkpoint saved by 4 ranks and trained on by 3 must end where the 4 would have.
"""

import argparse

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from torchjob.train import ShardingError, SyncCheck, init, shard_model, shutdown
from torchjob.train.ddp import checksum
from torchjob.train.fsdp import build_sharded
from torchjob.train.sharded_checkpoint import ShardedCheckpointer

parser = argparse.ArgumentParser()
parser.add_argument("--replicas", type=int, default=1)
parser.add_argument("--ckpt", required=True)
parser.add_argument("--steps", type=int, default=5, help="steps before the save")
parser.add_argument("--after", type=int, default=1, help="steps after the save (or the load)")
parser.add_argument("--load", action="store_true", help="load the newest checkpoint first, save none")
parser.add_argument("--async-save", action="store_true")
parser.add_argument("--save-at", type=int, default=0, help="also save after this step (before --steps)")
parser.add_argument("--keep-gathered", action="store_true", help="reshard_after_forward=False")
parser.add_argument("--from-meta", action="store_true", help="build_sharded: built on meta, filled unit by unit")
args = parser.parse_args()


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))


ctx = init()
print(f"RANK {ctx.rank} TRAINS WITH {ctx.backend} ON {ctx.device}", flush=True)
try:
    if args.from_meta:
        model = build_sharded(build, ctx, replicas=args.replicas, reshard_after_forward=not args.keep_gathered)
    else:
        model = shard_model(build(), ctx, replicas=args.replicas, reshard_after_forward=not args.keep_gathered)
except ShardingError as err:
    print(f"SHARDING ERROR: {err}", flush=True)
    shutdown(exit_code=4)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
checkpoints = ShardedCheckpointer(args.ckpt, ctx, keep=2, async_save=args.async_save)


def step(number: int) -> None:
    generator = torch.Generator().manual_seed(number)
    x, y = torch.randn(32, 16, generator=generator), torch.randn(32, 1, generator=generator)
    x, y = x.to(ctx.device), y.to(ctx.device)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    if number == 1 and ctx.is_main:  # between the forward and the backward: a resharded weight is a DTensor again
        print(f"FIRST UNIT GATHERED THROUGH BACKWARD {not isinstance(model[0].weight, DTensor)}", flush=True)
        print(f"LAST UNIT GATHERED THROUGH BACKWARD {not isinstance(model[4].weight, DTensor)}", flush=True)
    loss.backward()
    optimizer.step()


done = 0
if args.load:
    manifest = checkpoints.load(model, optimizer)
    assert manifest is not None, "no checkpoint to load"
    done = int(manifest["step"])
    if ctx.is_main:
        print(f"LOADED step {done} saved by {manifest['world_size']} ranks", flush=True)
else:
    for number in range(1, args.steps + 1):
        step(number)
        if number == args.save_at:  # an asynchronous save stages into buffers the save after it reuses
            checkpoints.save(number, model, optimizer)
    done = args.steps
    SyncCheck(model, ctx).verify(done)
    checkpoints.save(done, model, optimizer, extra={"note": "sharded"})
for number in range(done + 1, done + args.after + 1):
    step(number)
checkpoints.wait()
total = checksum(model)  # collective: the whole model, gathered from its shards
if ctx.is_main:
    print(f"CHECKSUM {float(total[0]):.6f} {float(total[1]):.6f} steps {checkpoints.steps()}", flush=True)
shutdown(exit_code=0)
