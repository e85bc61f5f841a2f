"""Replayed neighbours' copies (torchjob.train.replayed_copies) in a real gloo group of 4 processes, no spare: each
rank keeps a copy of its left neighbour's shard, stepped with that neighbour's gradients. In the 4th step, rank 2
fails in the all-reduce that ends the exchange of gradients, once it has taken part in it: the others step. The
group re-forms with the same 4 ranks and carries on from the 4th step, rank 2 stepping on with its own gradients.
Every copy is sent whole after the 1st step, and again after the 3rd (a unit's first step makes optimizer state).
Prints the step each rank carries on from, whether every copy holds its neighbour's live shard to the bit, and the
model's checksum, which must be an uninterrupted run's (--straight). With --twice, no failure: the 6th step
steps the optimizer a second time, which every rank refuses before it changes anything (``OptimizerStepsError``).
Rank 0 hosts the store."""

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from torchjob.train.context import DistContext
from torchjob.train.ddp import checksum
from torchjob.train.kept_shard import shard_of, tensors_of
from torchjob.train.replayed_copies import OptimizerStepsError, ReplayedCopies
from torchjob.train.sharded_in_place import ShardedState

parser = argparse.ArgumentParser()
parser.add_argument("--straight", action="store_true", help="no failure: the run to compare with")
parser.add_argument("--twice", action="store_true", help="no failure; the 6th step steps the optimizer twice")
args = parser.parse_args()
rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
store = dist.TCPStore("127.0.0.1", port, 4, rank == 0, timeout=timedelta(seconds=60))
ctx = DistContext(rank, rank, 4, torch.device("cpu"), "gloo", "test")
STEPS, FAILING = 8, 3  # the failing step is the 4th (3 done before it)


def form(generation: int) -> None:
    dist.init_process_group("gloo", store=dist.PrefixStore(f"g{generation}", store), rank=rank, world_size=4)  # type: ignore[attr-defined]


class Net(nn.Module):
    """A small model with a unit first used in the 3rd step: its first step makes optimizer state every copy
    lacks, so every copy is sent whole again after it (``Header.grows``)."""

    def __init__(self) -> None:
        super().__init__()
        self.late = nn.Linear(16, 16)
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x: torch.Tensor, late: bool) -> torch.Tensor:
        return self.body(self.late(x) if late else x)


def build() -> nn.Module:
    torch.manual_seed(0)
    return Net()


sent_whole = ReplayedCopies.seed


def seed(copies: ReplayedCopies, *given: object) -> None:
    print(f"SENT WHOLE AFTER STEP {given[-1]}", flush=True)
    sent_whole(copies, *given)  # type: ignore[arg-type]


ReplayedCopies.seed = seed  # type: ignore[method-assign]


form(0)
state = ShardedState(
    ctx,
    build,
    lambda model: torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1),
    replicas=1,
    units=lambda model: [model.late, model.body[0], model.body[2], model.body[4]],
)
assert isinstance(state.copies, ReplayedCopies)
real_all_reduce = dist.all_reduce


def taken_part_then_failed(*given: object, **named: object) -> None:
    real_all_reduce(*given, **named)  # type: ignore[arg-type]
    raise RuntimeError("failed once every rank had received its neighbour's gradients")


def step(done: int) -> None:
    state.before_step(ctx, done)
    generator = torch.Generator().manual_seed(done)
    x, y = torch.randn(32, 16, generator=generator), torch.randn(32, 1, generator=generator)
    state.optimizer.zero_grad()
    nn.functional.mse_loss(state.model(x, done >= 2), y).backward()
    failing = not (args.straight or args.twice) and done == FAILING and rank == 2
    if failing:
        dist.all_reduce = taken_part_then_failed  # the exchange's last collective (the model's own are sends)
    try:
        state.optimizer.step()
    finally:
        dist.all_reduce = real_all_reduce
    if args.twice and done == 5:
        try:
            state.optimizer.step()
        except OptimizerStepsError as error:
            print(f"REFUSED: {error}", flush=True)
            dist.barrier()
            dist.destroy_process_group()
            raise SystemExit(0) from None
    state.after_step(ctx, done + 1)


done, reformed = 0, args.straight or args.twice
while done < STEPS:
    failed = False
    try:
        step(done)
        done += 1
    except RuntimeError as error:
        failed = True
        print(f"RANK {rank} FAILED ({error})", flush=True)
    if not reformed and (failed or done == FAILING + 1):  # rank 2 failed, the others stepped: every rank re-forms
        state.release()
        dist.destroy_process_group()
        form(1)
        done, reformed = state.restore(ctx, has_state=True, step=done).step, True
        print(f"RANK {rank} AT {done}", flush=True)
copies = state.copies
assert copies is not None and copies.copy is not None
live = shard_of(dict(state.model.named_parameters()), state.optimizer, 4, dict(state.model.named_buffers()))
mine = torch.stack([t.double().sum() for t in tensors_of(live)])
held = torch.stack([t.double().sum() for t in tensors_of(copies.copy)])
table = [torch.zeros_like(mine) for _ in range(4)]
dist.all_gather(table, mine)
print(f"COPIES MATCH {torch.equal(held, table[(rank - 1) % 4]) and copies.copy_step == STEPS}", flush=True)
print(f"CHECKSUM {checksum(state.model).tolist()}", flush=True)
dist.barrier()
dist.destroy_process_group()
