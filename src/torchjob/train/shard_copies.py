"""A copy of each rank's shard in its neighbour's memory, so that plain FSDP (one replica group) is repaired in place.

Under FSDP over S ranks, no other rank holds rank r's shard. So after every step, rank r sends its shard (the
weights and the optimizer's state; buffers are whole on every rank) to rank (r + 1) % S, which keeps it as plain
tensors, received in the place of the copy before. A spare given rank r's place receives that copy from rank
r + 1 (sharded_in_place.py). The cost: one shard of memory per rank, and the exchange after every step (every
member waits for it: the shard's bytes over the machine's bandwidth, measured in bench.state).

A copy is of the step the survivors hold only when the exchange after that step completed. A rank lost while it
sent its shard (or after its step's last collective, before it sent) leaves its copy a step behind the
survivors, and the state of the step before cannot be mixed with theirs: the group then restarts from its
checkpoint, and says why. Copies are kept on the model's device: CPU memory under gloo (this machine);
under NCCL they would take GPU memory, and that path has not run on a GPU.
"""

from __future__ import annotations

import pickle
from dataclasses import replace

import torch
import torch.distributed as dist

from torchjob.train.context import DistContext
from torchjob.train.kept_shard import KeptShard, allocate, layout_of, tensors_of

# What a receiver allocates and keeps from the layout: the tensors' shapes and types, and the optimizer's state that is
# not a tensor (sent with the layout, so sent again whenever it changes).
Signature = tuple[list[tuple[tuple[int, ...], torch.dtype]], list[object]]


class NeighbourCopies:
    """This rank's copy of its left neighbour's shard, refreshed after every step (see the module)."""

    def __init__(self) -> None:
        self.copy: KeptShard | None = None  # rank (r - 1) % S's shard
        self.step = -1  # the step the copy is of; -1: none (never received, or being received)
        self._told: Signature | None = None  # the layout the right neighbour last heard from this rank

    def reset(self) -> None:
        """At a re-form: every member tells its layout again (a joiner knows none of its neighbour's)."""
        self._told = None

    def refresh(self, ctx: DistContext, mine: KeptShard, step: int) -> None:
        """Send this rank's shard, as of ``step``, to its right neighbour; receive the left one's into the copy."""
        world, rank = ctx.world_size, ctx.rank
        if world < 2:
            return
        right, left = (rank + 1) % world, (rank - 1) % world
        sent = tensors_of(replace(mine, buffers={}))
        plain = [v for state in mine.optimizer.values() for v in state.values() if not isinstance(v, torch.Tensor)]
        signature = ([(tuple(t.shape), t.dtype) for t in sent], plain)
        self.step = -1  # received in place from here on: no copy until it is whole again
        layout = b"" if signature == self._told else pickle.dumps(layout_of(mine, with_params=True))
        theirs = torch.zeros(1, dtype=torch.int64)
        _all(dist.irecv(theirs, src=left), dist.isend(torch.tensor([len(layout)], dtype=torch.int64), dst=right))
        coming = int(theirs[0])
        if coming or layout:
            incoming = torch.empty(coming, dtype=torch.uint8)
            _all(
                dist.irecv(incoming, src=left) if coming else None,
                dist.isend(torch.frombuffer(bytearray(layout), dtype=torch.uint8), dst=right) if layout else None,
            )
            if coming:
                self.copy = allocate(pickle.loads(incoming.numpy().tobytes()), ctx.device)
        self._told = signature
        if self.copy is None:
            raise RuntimeError(f"rank {rank}: rank {left} sent its shard without its layout")
        into = tensors_of(self.copy)
        _all(*[dist.irecv(t, src=left) for t in into], *[dist.isend(t.contiguous(), dst=right) for t in sent])
        self.step = step


def _all(*works: dist.Work | None) -> None:
    for work in works:
        if work is not None:
            work.wait()
