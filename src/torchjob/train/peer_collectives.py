"""FSDP2's all-gathers and reduce-scatters over gloo, as sends and receives between each pair of the shard group.

On the CPU, gloo carries FSDP2's collectives, and its ``reduce_scatter_tensor`` is an all-reduce of the whole
input with this rank's part kept: every rank sends and receives the whole unit's gradients, not its 1/N. Measured
here (4 processes on 2 cores, two shard groups of 2, one GPT-100m step's worth of units): 0.84-0.86 s a step for
gloo's reduce-scatter against 0.24-0.25 s sending each peer its part and summing what comes back; all-gathers
0.35-0.44 s against 0.22 s. ``use_peer_collectives(module)`` gives a sharded module (``fully_shard``'d) both,
through FSDP2's own ``set_custom_all_gather`` and ``set_custom_reduce_scatter``.

Each peer is sent its part at once and each part received at once (one message each way per pair, the bytes
gloo's ring would move for a reduce-scatter, none twice). They are waited for in a thread a member leaves behind
once its group's connections are cut (``peers.done_or_left``), as the neighbours' copies are: gloo did not always
wake them when a peer died (``_wait``). The parts are summed in the group's rank order, the same on every run.
An asynchronous collective (FSDP2's calls are synchronous unless told otherwise) and any reduction but a sum or a
mean are left to gloo's own. Between ranks of one machine the all-gathers go through shared memory instead, where
the model's sharding gave them a ``SharedMemoryGather`` and every rank of the group can use it (shared_memory.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from torchjob.train import peers
from torchjob.train.kept_shard import wait_all
from torchjob.train.shared_memory import SharedMemoryGather

# Their own tags, apart from the other sends torchjob makes over the same group (the neighbours' copies use 0).
_GATHER_TAG, _SCATTER_TAG = 71, 72


def use_peer_collectives(module: FSDPModule, shared: SharedMemoryGather | None = None) -> None:
    """Have ``module``'s all-gathers and reduce-scatters sent between peers (this module's docstring): for a
    module sharded over a CPU mesh, where gloo carries them. With ``shared`` (one for every unit of a model), its
    all-gathers go through shared memory where every rank of the group can (shared_memory.py)."""
    module.set_custom_all_gather(PeerAllGather(shared))
    module.set_custom_reduce_scatter(PeerReduceScatter())


class _Empty:
    """FSDP2's buffers for these collectives: plain CPU tensors (gloo registers no memory of its own)."""

    def allocate(self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)


class PeerAllGather(_Empty, AllGather):
    """Every rank's part of ``output`` from that rank (through ``shared`` memory where the group has it); this
    rank's own copied in."""

    def __init__(self, shared: SharedMemoryGather | None = None) -> None:
        self.shared = shared

    def __call__(
        self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup, async_op: bool = False
    ) -> dist.Work | None:
        if async_op:
            return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=True)
        parts = output_tensor.chunk(group.size())
        me = group.rank()
        if not _same_memory(parts[me], input_tensor):  # FSDP2 copies its input into the output's part already
            parts[me].copy_(input_tensor)
        if self.shared is not None and self.shared.all_gather(output_tensor, input_tensor, group):
            return None
        others = [peer for peer in range(group.size()) if peer != me]
        receives = [dist.irecv(parts[peer], group=group, group_src=peer, tag=_GATHER_TAG) for peer in others]
        sends = [dist.isend(input_tensor, group=group, group_dst=peer, tag=_GATHER_TAG) for peer in others]
        _wait(receives, sends)
        return None


class PeerReduceScatter(_Empty, ReduceScatter):
    """This rank's part of every rank's ``input``, summed (or averaged) into ``output``."""

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: dist.ReduceOp.RedOpType,
        async_op: bool = False,
    ) -> dist.Work | None:
        if async_op or op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group, async_op=async_op)
        size, me = group.size(), group.rank()
        parts = input_tensor.chunk(size)
        received = {peer: torch.empty_like(output_tensor) for peer in range(size) if peer != me}
        receives = [dist.irecv(into, group=group, group_src=peer, tag=_SCATTER_TAG) for peer, into in received.items()]
        sends = [dist.isend(parts[peer], group=group, group_dst=peer, tag=_SCATTER_TAG) for peer in received]
        _wait(receives, sends)
        ordered = [parts[me] if peer == me else received[peer] for peer in range(size)]
        if size == 1:
            output_tensor.copy_(ordered[0])
        else:  # ((p0 + p1) + p2) + ...: the first sum written into the output, not copied there first
            torch.add(ordered[0], ordered[1], out=output_tensor)
            for part in ordered[2:]:
                output_tensor.add_(part)
        if op == dist.ReduceOp.AVG:
            output_tensor.div_(size)
        return None


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride()


def _wait(receives: list[dist.Work | None], sends: list[dist.Work | None]) -> None:
    """Every receive, then every send, in a thread left behind where the group is repaired around a lost peer
    (``peers.done_or_left``). gloo did not wake these waits once a peer died: by hand (HSDP, a rank SIGKILLed), a
    survivor waited in its all-gather's send to the killed rank, whose own part had come, and in another trial
    every survivor waited in an all-gather's receive after its connections were cut, until spares replaced them
    (1 repair in ~4); gloo's own collectives are not seen to."""
    peers.done_or_left(lambda: wait_all(*receives, *sends), torch.device("cpu"), "a collective's waits were")
