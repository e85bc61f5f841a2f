"""FSDP2's collectives sent between peers (torchjob.train.peer_collectives) against gloo's own, in one group of
four ranks: the all-gather and the reduce-scatter (sum and mean) over the whole group and over each half, then a
small model sharded by ``fsdp.shard_on`` (which uses them on the CPU) trained beside the same model sharded by
FSDP2 alone, as FSDP and as HSDP. Prints what matched. With ``--die R``: rank R exits before a reduce-scatter, and
every other rank prints how its own reduce-scatter ended."""

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

parser = argparse.ArgumentParser()
parser.add_argument("--die", type=int, default=-1)
args = parser.parse_args()
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=4, timeout=timedelta(seconds=60))
halves = [dist.new_group([0, 1]), dist.new_group([2, 3])]
gather, scatter = PeerAllGather(), PeerReduceScatter()


def _param_groups(model: nn.Module) -> list[object]:
    return [group for unit in (model[0], model[2], model[4]) for group in unit._get_fsdp_state()._fsdp_param_groups]


if args.die >= 0:
    if rank == args.die:
        os._exit(3)
    try:
        scatter(torch.empty(1000), torch.ones(4000), dist.group.WORLD, dist.ReduceOp.SUM)
        print("REDUCE-SCATTER ENDED", flush=True)
    except RuntimeError as error:
        print(f"REDUCE-SCATTER FAILED: {str(error).splitlines()[0]}", flush=True)
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
    trained = all(not torch.equal(a, b) for a, b in zip(initial, models[0], strict=True))
    close = all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(*models, strict=True))
    print(f"TRAINED ALIKE replicas={replicas} {trained and close}", flush=True)
dist.barrier()
dist.destroy_process_group()
