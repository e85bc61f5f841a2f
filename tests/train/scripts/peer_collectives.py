"""FSDP2's collectives sent between peers (torchjob.train.peer_collectives) against gloo's own, in one group of
four ranks: the all-gather and the reduce-scatter (sum and mean) over the whole group and over each half, then a
small model sharded by ``fsdp.shard_on`` (which uses them on the CPU) trained beside the same model sharded by
FSDP2 alone, as FSDP and as HSDP; the all-gathers through shared memory too (torchjob.train.shared_memory), several
in a row and one past the files' first size, and whether they went through it (not where rank ``--refuse`` does not
offer it), and in the group re-formed with a new member. Prints what matched. With ``--die R``: rank R exits
before a reduce-scatter (``--shared``: before a shared-memory gather, once the files are made), and every other
rank prints how its own ended."""

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from torchjob.train import fsdp
from torchjob.train.context import DistContext
from torchjob.train.peer_collectives import PeerAllGather, PeerReduceScatter
from torchjob.train.shared_memory import SharedMemoryGather

parser = argparse.ArgumentParser()
parser.add_argument("--die", type=int, default=-1)
parser.add_argument("--shared", action="store_true")
parser.add_argument("--refuse", type=int, default=-1)
parser.add_argument("--folder", default="")  # the re-formed group's store
args = parser.parse_args()
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=4, timeout=timedelta(seconds=60))
halves = [dist.new_group([0, 1]), dist.new_group([2, 3])]
gather, scatter = PeerAllGather(), PeerReduceScatter()


def _param_groups(model: nn.Module) -> list[object]:
    return [group for unit in (model[0], model[2], model[4]) for group in unit._get_fsdp_state()._fsdp_param_groups]


if args.die >= 0:
    what = "SHARED ALL-GATHER" if args.shared else "REDUCE-SCATTER"
    shared = PeerAllGather(SharedMemoryGather())
    if args.shared:
        shared(torch.empty(4000), torch.ones(1000), dist.group.WORLD)  # the files made by every rank
    if rank == args.die:
        os._exit(3)
    try:
        if args.shared:
            shared(torch.empty(4000), torch.ones(1000), dist.group.WORLD)
        else:
            scatter(torch.empty(1000), torch.ones(4000), dist.group.WORLD, dist.ReduceOp.SUM)
        print(f"{what} ENDED", flush=True)
    except RuntimeError as error:
        print(f"{what} FAILED: {str(error).splitlines()[0]}", flush=True)
    os._exit(0)

for name, group in (("world", dist.group.WORLD), ("half", halves[rank // 2])):
    size = group.size()
    generator = torch.Generator().manual_seed(rank)
    # Whole numbers: their sums are exact in any order, so gloo's and ours must agree to the bit.
    whole = torch.randint(-1000, 1000, (size * 999,), generator=generator).float()
    mine = whole[:999].clone()
    ours, theirs = torch.empty(size * 999), torch.empty(size * 999)
    gather(ours, mine, group)
    dist.all_gather_into_tensor(theirs, mine, group=group)
    print(f"ALL-GATHER {name} {torch.equal(ours, theirs)}", flush=True)
    # As FSDP2 calls it: this rank's input already in its part of the output (a view of it).
    aliased = torch.empty(size * 999)
    own = aliased[group.rank() * 999 : (group.rank() + 1) * 999]
    own.copy_(mine)
    gather(aliased, own, group)
    print(f"ALL-GATHER {name} into its own part {torch.equal(aliased, theirs)}", flush=True)
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
        part, expected = torch.empty(999), torch.empty(999)
        scatter(part, whole, group, op)
        dist.reduce_scatter_tensor(expected, whole, op=dist.ReduceOp.SUM, group=group)
        if op == dist.ReduceOp.AVG:
            expected /= size
        print(f"REDUCE-SCATTER {name} {op} {torch.equal(part, expected)}", flush=True)
    shared_gather = SharedMemoryGather(offered=rank != args.refuse)
    # Five gathers in a row (the slots alternate), the last with parts past the files' first size (made anew).
    for call, length in enumerate((999, 999, 999, 999, 5 * 2**20)):
        mine = torch.randint(-1000, 1000, (length,), generator=generator).float()
        ours, theirs = torch.empty(size * length), torch.empty(size * length)
        PeerAllGather(shared_gather)(ours, mine, group)
        dist.all_gather_into_tensor(theirs, mine, group=group)
        used = shared_gather.used_by(group)
        print(f"SHARED ALL-GATHER {name} {call} {torch.equal(ours, theirs)} shared memory used: {used}", flush=True)

ctx = DistContext(rank, rank, 4, torch.device("cpu"), "gloo", "test")
for replicas in (1, 2):
    models = []
    for ours_too in (True, False):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        mesh = fsdp.mesh_for(ctx, replicas)
        initial = [p.detach().clone() for p in model.parameters()]
        if ours_too:
            fsdp.shard_on(model, mesh, [model[0], model[2], model[4]])
            comms = {type(group._reduce_scatter_comm).__name__ for group in _param_groups(model)}
            comms |= {type(group._all_gather_comm).__name__ for group in _param_groups(model)}
            print(f"COMMS replicas={replicas} {sorted(comms)}", flush=True)
            gathers = {group._all_gather_comm for group in _param_groups(model)}
            shard_group = mesh.get_group(fsdp.SHARD)
        else:
            for unit in (model[0], model[2], model[4], model):
                fully_shard(unit, mesh=mesh)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        for number in range(3):
            generator = torch.Generator().manual_seed(number * 10 + rank)
            x, y = torch.randn(8, 16, generator=generator), torch.randn(8, 1, generator=generator)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        models.append([p.detach().full_tensor() for p in model.parameters()])
    used = {gather.shared.used_by(shard_group) for gather in gathers}
    print(f"SHARED TRAINING replicas={replicas} through shared memory: {sorted(used, key=str)}", flush=True)
    trained = all(not torch.equal(a, b) for a, b in zip(initial, models[0], strict=True))
    close = all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(*models, strict=True))
    print(f"TRAINED ALIKE replicas={replicas} {trained and close}", flush=True)

# The group re-formed, as an in-place repair does: its names are the old group's, and rank 3 joins it new (a spare,
# with a model of its own) while the others keep the files their old group made.
kept = SharedMemoryGather()
PeerAllGather(kept)(torch.empty(4 * 999), torch.ones(999), dist.group.WORLD)
old_name = dist.group.WORLD.group_name
dist.destroy_process_group()
store = dist.FileStore(os.path.join(args.folder, "reformed"), 4)
dist.init_process_group("gloo", store=store, rank=rank, world_size=4, timeout=timedelta(seconds=60))
joined = kept if rank != 3 else SharedMemoryGather()
mine = torch.full((999,), float(rank))
ours, theirs = torch.empty(4 * 999), torch.empty(4 * 999)
PeerAllGather(joined)(ours, mine, dist.group.WORLD)
dist.all_gather_into_tensor(theirs, mine)
same_name = dist.group.WORLD.group_name == old_name
used = joined.used_by(dist.group.WORLD)
print(f"RE-FORMED ALL-GATHER same name {same_name} {torch.equal(ours, theirs)} shared memory used: {used}", flush=True)
dist.barrier()
dist.destroy_process_group()
