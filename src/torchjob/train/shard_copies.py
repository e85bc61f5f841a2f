"""A copy of each rank's shard in its neighbour's memory, so that plain FSDP (one replica group) is repaired in place.

Under FSDP over S ranks, no other rank holds rank r's shard. So rank r sends its shard (its weights, buffers and
optimizer state) to its keeper, its "right neighbour", which keeps it as a copy; a spare given rank r's place
receives the copy from the keeper (sharded_in_place.py). The keeper is one replica over: rank (r + P) % S where
each replica (a Pod; a machine under torchrun) runs P adjacent ranks, so that a replica lost whole, with its Pod or
its node, takes no copy of its own shards with it; rank (r + 1) % S where the group is one replica, or each
replica one rank. Where the optimizer's step can be replayed and the copy is kept every step, the copy is stepped
with rank r's gradients instead (replayed_copies.py: one shard of memory, a third of the bytes); this module sends
it whole, every ``copy_every`` steps (where the exchange costs too much: a repair then goes back to the last
exchange, up to ``copy_every`` - 1 steps trained again) or after every step (an optimizer whose step is not
replayed). What both keep and agree on (``Holding``, ``agree``), who keeps whose copy and how they send is here.

A rank can be lost in the middle of that exchange, or after its step but before it sent: its neighbour then has
no copy of its newest step, while the survivors went on to it. So a copy is received beside the one before, and
each rank keeps its own shard as of the last exchange every rank completed. After the exchange, one all-reduce of
one integer says that every rank received its neighbour's shard; only then is the new copy kept in place of the
old. At a repair the group agrees on the newest step that every survivor still holds (as it is, or as it kept
it) and each lost rank's copy is of (``agree``): the step it was at, or the step before, retried. The cost: three
shards of memory per rank (its neighbour's copy, the one being received, its own) and two chunks' staging (kept
from one exchange to the next: made anew each time, they fragmented the C heap, which grew by their size every
step), and after every step the exchange every member waits for: the shard's bytes, sent in a few large chunks
(shard_chunks.py), and its own shard copied (bench.state). Copies are kept on the model's device: CPU memory
under gloo (this machine); under NCCL they would take GPU memory, and that path has not run on a GPU.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import torch
import torch.distributed as dist

from torchjob.train import peers, shard_chunks
from torchjob.train.context import DistContext
from torchjob.train.kept_shard import (
    KeptShard,
    allocate_flat,
    cloned,
    copied_into,
    layout_of,
    shapes_of,
    tensors_of,
    wait_all,
)

# What a receiver allocates and keeps from the layout: the tensors' shapes and types, and the optimizer's state that is
# not a tensor (sent with the layout, so sent again whenever it changes).
Signature = tuple[list[tuple[tuple[int, ...], torch.dtype]], list[object]]


class CopyError(RuntimeError):
    """No step at which every survivor's shard and every lost rank's copy agree."""


@dataclass(frozen=True)
class Holding:
    """What one member of a re-formed group holds, as all-gathered: the step of its live state (-1: a joiner),
    of its own kept shard, of its neighbour's copy, of the copy it was receiving (-1: none, or not whole), and the
    step it can step its live shard on to (replayed copies, replayed_copies.py: it holds that step's gradients,
    its own and its neighbour's, and every rank had received its neighbour's; -1: none)."""

    live: int
    own: int
    copy: int
    received: int
    ahead: int = -1

    def steps(self) -> tuple[int, int, int, int, int]:
        return self.live, self.own, self.copy, self.received, self.ahead


class NeighbourCopies:
    """This rank's copies: its left neighbour's shard, and its own (see the module)."""

    def __init__(self) -> None:
        self.copy: KeptShard | None = None  # the left neighbour's shard (neighbours()), as of copy_step
        self.copy_step = -1
        self._copy_flat: torch.Tensor | None = None  # the buffer copy's tensors are views of (shard_chunks.py)
        self._received: KeptShard | None = None  # the next copy, being received; whole as of received_step
        self._received_flat: torch.Tensor | None = None
        self.received_step = -1
        self.own: KeptShard | None = None  # this rank's shard as of own_step (the last exchange all completed)
        self.own_step = -1
        self._layout: KeptShard | None = None  # the left neighbour's layout, as last heard
        self._told: Signature | None = None  # the layout the right neighbour last heard from this rank
        self.due = True  # an exchange is due at the next step, whatever the interval: none since the group formed
        self._staging = shard_chunks.Staging()  # the sends' two staging buffers, kept from one exchange to the next

    def reset(self) -> None:
        """At a re-form: every member tells its layout again (a joiner knows none of its neighbour's), at the
        next step (a joiner has no copy, nor a shard of its own kept)."""
        self._told = None
        self.due = True

    def refresh(self, ctx: DistContext, mine: KeptShard, step: int) -> None:
        """Send this rank's shard, as of ``step``, to its right neighbour and receive the left one's; once every
        rank has, keep both (the copy, and this rank's own shard)."""
        if ctx.world_size < 2:
            return
        right, left = neighbours(ctx)
        sent = tensors_of(mine)
        plain = [v for state in mine.optimizer.values() for v in state.values() if not isinstance(v, torch.Tensor)]
        plain.append(repr(mine.options))  # a scheduler's new learning rate is told as the layout is
        signature = ([(tuple(t.shape), t.dtype) for t in sent], plain)
        self.received_step = -1
        self._exchange_layout(ctx, mine, signature, right, left)
        assert self._layout is not None
        if self._received is None or self._received_flat is None:
            self._received, self._received_flat = allocate_flat(self._layout, ctx.device)
        flat = self._received_flat
        incoming = shard_chunks.layout_of(tensors_of(self._received)).chunks
        outgoing = shard_chunks.Outgoing(sent, staging=self._staging)

        swap_chunks(ctx, flat, incoming, left, outgoing, right, "the neighbours' copies were")
        self.received_step = step
        # Every rank has received its neighbour's shard: only now may any rank let go of the copy before.
        dist.all_reduce(torch.zeros(1, dtype=torch.int64, device=ctx.device))
        self.copy, self._received = self._received, self.copy
        self._copy_flat, self._received_flat = self._received_flat, self._copy_flat
        self.copy_step, self.received_step = step, -1
        if self._received is not None and shapes_of(self._received) != shapes_of(self._layout):
            self._received = self._received_flat = None  # of an older layout: allocated anew for the next exchange
        self._keep_own(mine, step)
        self.due = False

    def _exchange_layout(self, ctx: DistContext, mine: KeptShard, signature: Signature, right: int, left: int) -> None:
        """Each rank's layout to its right neighbour, where it changed (or was never told since the last
        re-form): a length, then the pickle."""
        coming = swap_bytes(b"" if signature == self._told else pickle.dumps(layout_of(mine)), right, left)
        if coming:
            heard: KeptShard = pickle.loads(coming)
            if self._received is not None and shapes_of(self._received) != shapes_of(heard):
                self._received = self._received_flat = None
            self._layout = heard
        self._told = signature
        if self._layout is None:
            raise RuntimeError(f"rank {ctx.rank}: rank {left} sent its shard without its layout")

    def _keep_own(self, mine: KeptShard, step: int) -> None:
        if self.own is not None and shapes_of(self.own) == shapes_of(mine):
            copied_into(self.own, mine)
        else:
            self.own = cloned(mine)
        self.own_step = step

    def live_step(self, live: int) -> int:
        """The step of this rank's live shard: the one its training loop completed."""
        return live

    def holding(self, live: int) -> Holding:
        return Holding(live, self.own_step, self.copy_step, self.received_step)

    def copy_of(self, step: int) -> KeptShard:
        """The left neighbour's shard as of ``step`` (``agree`` chose a step this rank holds it at)."""
        found = self.copy if self.copy_step == step else self._received if self.received_step == step else None
        if found is None:
            raise CopyError(f"no copy of step {step} is kept here")
        return found


def keeper_of(rank: int, world: int, per_replica: int) -> int:
    """The rank that keeps a copy of ``rank``'s shard: the rank as far on as a replica has ranks, so on another
    replica, where the group has more than one replica of ``per_replica`` ranks each; the next rank otherwise."""
    return (rank + _stride(world, per_replica)) % world


def neighbours(ctx: DistContext) -> tuple[int, int]:
    """This rank's keeper (it sends its shard there: the "right" neighbour) and the rank whose shard it keeps (it
    receives from there: the "left" one)."""
    stride = _stride(ctx.world_size, ctx.local_world_size)
    return (ctx.rank + stride) % ctx.world_size, (ctx.rank - stride) % ctx.world_size


def _stride(world: int, per_replica: int) -> int:
    return per_replica if 1 < per_replica < world and world % per_replica == 0 else 1


def agree(holdings: dict[int, Holding], world: int, per_replica: int) -> tuple[int, dict[int, int]]:
    """The step a re-formed group carries on from, and for each joiner the rank keeping its copy: the newest
    step that every survivor holds (live, its own kept shard, or one it can step on to) and each joiner's keeper
    holds a copy of."""
    joiners = [rank for rank in range(world) if holdings[rank].live < 0]
    keepers = {joiner: keeper_of(joiner, world, per_replica) for joiner in joiners}
    for joiner, keeper in keepers.items():
        if holdings[keeper].live < 0:
            raise CopyError(
                f"no survivor holds rank {joiner}'s shard: rank {keeper}, which kept its copy, was lost with it"
            )
    survivors = [h for h in holdings.values() if h.live >= 0]
    candidates = sorted({s for h in survivors for s in h.steps() if s >= 0}, reverse=True)
    for step in candidates:
        if all(step in (h.live, h.own, h.ahead) for h in survivors) and all(
            step in (holdings[k].copy, holdings[k].received) for k in keepers.values()
        ):
            return step, keepers
    said = "; ".join(
        f"rank {rank}: {h.live} live, {h.own} kept, copy {h.copy}"
        for rank, h in sorted(holdings.items())
        if h.live >= 0
    )
    raise CopyError(f"no step that every survivor holds and the lost ranks' copies are of ({said})")


def swap_bytes(payload: bytes | None, right: int | None, left: int | None) -> bytes:
    """``payload`` to rank ``right`` and what rank ``left`` sends, each side where not None: a length, then the
    bytes where there are any (b"": nothing new)."""
    theirs = torch.zeros(1, dtype=torch.int64)
    wait_all(
        dist.irecv(theirs, src=left) if left is not None else None,
        dist.isend(torch.tensor([len(payload or b"")], dtype=torch.int64), dst=right) if right is not None else None,
    )
    coming = int(theirs[0])
    incoming = torch.empty(coming, dtype=torch.uint8)
    wait_all(
        dist.irecv(incoming, src=left) if left is not None and coming else None,
        dist.isend(torch.frombuffer(bytearray(payload), dtype=torch.uint8), dst=right)
        if right is not None and payload
        else None,
    )
    return incoming.numpy().tobytes() if coming else b""


def swap_chunks(
    ctx: DistContext,
    flat: torch.Tensor | None,
    incoming: list[shard_chunks.Chunk],
    left: int | None,
    outgoing: shard_chunks.Outgoing | None,
    right: int | None,
    what: str,
) -> None:
    """``outgoing``'s chunks to rank ``right`` while ``incoming``'s (slices of ``flat``) come from rank ``left``,
    each side where there is one; left behind once this process's connections are cut (peers.done_or_left)."""
    sending = len(outgoing) if outgoing is not None and right is not None else 0
    receiving = incoming if flat is not None and left is not None else []

    def exchange() -> None:
        # In chunks of many tensors (shard_chunks.py), one each way at a time, as gloo's own collectives send:
        # a send queued behind others to a peer that died mid-exchange was seen to wait forever (no error),
        # where the one in flight fails. The next chunk is packed while one is in flight.
        assert outgoing is not None or not sending
        ready = outgoing.chunk(0) if outgoing is not None and sending else None
        for index in range(max(len(receiving), sending)):
            chunk = receiving[index] if index < len(receiving) else None
            works = (
                dist.irecv(flat[chunk.start : chunk.stop], src=left)
                if chunk is not None and flat is not None
                else None,
                dist.isend(ready, dst=right) if ready is not None else None,
            )
            ready = outgoing.chunk(index + 1) if outgoing is not None and index + 1 < sending else None
            wait_all(*works)

    if sending or receiving:
        peers.done_or_left(exchange, ctx.device, what)
