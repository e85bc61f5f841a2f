"""A neighbour's copy of each rank's shard, kept current by stepping it with that rank's gradients (plain FSDP).

As shard_copies.py keeps it, a copy costs three shards of memory (the copy, the next one received beside it, and
the rank's own shard as of the last exchange) and the whole shard's bytes after every step. Where the optimizer's
step is elementwise (copy_replay.py) and the copy is kept every step, this module keeps it instead: in the
optimizer's step, before it changes anything, each rank sends its gradients (and buffers) to its right neighbour,
which steps its copy with them after the live step. One shard of memory (the copy) and one gradient's worth (what
is received into, kept from step to step); a third of the bytes under Adam.

Nothing needs going back. The exchange ends with one all-reduce of one integer, before any rank steps: a rank is
past it only once every rank has entered it, each having received its neighbour's gradients whole. So where a rank
is lost in the exchange, either no survivor stepped and every copy is of the step before, or every keeper holds
the gradients of the step, and a survivor that had not stepped steps on (``Holding.ahead``: its own shard with its
own gradients, its copy with its neighbour's). Where the lost rank was keeping a copy, that copy is sent anew,
whole, after the next step (``seed``), as every copy is after the group's first step.

One optimizer step per training step (``step_fn``) is followed: a second would be replayed too, but a repair in
between would count the step once, and the lost rank's copy would be an optimizer step off its peers' shards. So a
second is refused (``OptimizerStepsError``) before it changes anything.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from torchjob.train import copy_replay, shard_chunks
from torchjob.train.context import DistContext
from torchjob.train.kept_shard import KeptShard, allocate_flat, layout_of, tensors_of
from torchjob.train.shard_copies import CopyError, Holding, neighbours, swap_bytes, swap_chunks


class OptimizerStepsError(ValueError):
    """The optimizer stepped twice in one training step: the copies, stepped with each rank's gradients, follow one."""


@dataclass(frozen=True)
class Header:
    """What a rank's gradients of a step come with, sent where it changed: whether the step makes optimizer state
    its copy lacks (its copy is then sent whole after the step instead), which parameters have gradients, which
    buffers follow them, and each parameter group's options (its learning rate... as of this step)."""

    grows: bool
    names: tuple[str, ...]
    buffers: tuple[str, ...]
    options: list[dict[str, Any]]


class ReplayedCopies:
    """This rank's copy of its left neighbour's shard, stepped with its gradients (see the module)."""

    def __init__(self, kind: type[torch.optim.Optimizer]) -> None:
        self.kind = kind  # the optimizer's class, which steps the copy as it steps the live shard
        self.copy: KeptShard | None = None  # the left neighbour's shard (shard_copies.neighbours), as of copy_step
        self.copy_step = -1
        self.right_holds = False  # the right neighbour holds a copy of this rank's shard, as of its live step
        self.in_step = False  # a training step is under way (its optimizer steps are the step's own)
        self.stepped = False  # this rank's optimizer stepped in the training step under way
        self._pending: dict[str, torch.Tensor] | None = None  # the left neighbour's gradients of this step, whole
        self._pending_buffers: dict[str, torch.Tensor] = {}
        self._heard: Header | None = None  # the left neighbour's header, as last heard
        self._told: Header | None = None  # the header the right neighbour last heard from this rank
        self._received_flat: torch.Tensor | None = None  # what gradients are received into, kept step to step
        self._mine: dict[str, torch.Tensor] | None = None  # this rank's own gradients, received and not yet stepped
        self._staging = shard_chunks.Staging()

    def holding(self, live: int) -> Holding:
        """What this rank holds, ``live`` being the step its training loop completed."""
        at = self.live_step(live)
        copy = self.copy_step if self.copy is not None else -1
        received = copy + 1 if copy >= 0 and self._pending is not None else -1
        ahead = at + 1 if self._mine is not None and self.in_step and not self.stepped else -1
        return Holding(at, -1, copy, received, ahead)

    def live_step(self, live: int) -> int:
        """The step of this rank's live shard: the next, where its optimizer stepped in a step that then failed."""
        return live + int(self.stepped)

    def own_gradients(self) -> dict[str, torch.Tensor]:
        """This rank's gradients of the step it can step on to (``Holding.ahead``)."""
        if self._mine is None:
            raise CopyError("no gradients of a step to step on to are kept here")
        return self._mine

    def before_step(
        self,
        ctx: DistContext,
        grads: dict[str, torch.Tensor],
        buffers: dict[str, torch.Tensor],
        options: list[dict[str, Any]],
        grows: bool,
    ) -> None:
        """In the optimizer's step, before it changes anything: this rank's gradients to its right neighbour, its
        left neighbour's received; then one all-reduce that every rank is past only once every rank received."""
        if ctx.world_size < 2:
            return
        if self.in_step and self.stepped:
            raise OptimizerStepsError(
                "the optimizer stepped twice in one training step: plain FSDP's neighbours' copies are stepped with "
                "each rank's gradients once a training step (make one optimizer step a step, or send the copies "
                "whole: copy_every=N, N > 1)"
            )
        right, left = neighbours(ctx)
        send, receive = self.right_holds, self.copy is not None
        header = Header(grows, tuple(sorted(grads)), tuple(sorted(buffers)), options)
        if send or receive:
            coming = swap_bytes(
                b"" if header == self._told else pickle.dumps(header),
                right if send else None,
                left if receive else None,
            )
            if send:
                self._told = header
            if coming:
                self._heard = pickle.loads(coming)
        if send and grows:
            send = self.right_holds = False  # its copy is sent whole after the step
        heard = self._heard
        if receive and heard is None:
            raise CopyError(f"rank {ctx.rank}: rank {left} sent its gradients without saying which")
        if receive and heard is not None and heard.grows:
            receive, self.copy = False, None  # sent whole after the step
        outgoing = (
            shard_chunks.Outgoing(
                [grads[n] for n in header.names] + [buffers[b] for b in header.buffers], staging=self._staging
            )
            if send
            else None
        )
        flat, incoming, views = None, [], []
        if receive:
            assert heard is not None and self.copy is not None
            specs = [(self.copy.params[n].shape, self.copy.params[n].dtype) for n in heard.names]
            specs += [(self.copy.buffers[b].shape, self.copy.buffers[b].dtype) for b in heard.buffers]
            placed = shard_chunks.layout(specs)
            if self._received_flat is None or self._received_flat.numel() < placed.total:
                self._received_flat = torch.empty(placed.total, dtype=torch.uint8, device=ctx.device)
            flat, incoming = self._received_flat, placed.chunks
            views = shard_chunks.views(flat, specs, placed)
        swap_chunks(ctx, flat, incoming, left, outgoing, right, "the neighbours' gradients were")
        if receive:
            assert heard is not None
            count = len(heard.names)
            self._pending = dict(zip(heard.names, views[:count], strict=True))
            self._pending_buffers = dict(zip(heard.buffers, views[count:], strict=True))
        self._mine = None if grows else grads  # a step that makes state is not stepped on to (copy_replay.py)
        dist.all_reduce(torch.zeros(1, dtype=torch.int64, device=ctx.device))

    def begin_step(self) -> None:
        self.in_step, self.stepped = True, False

    def after_optimizer_step(self) -> None:
        """The live shard stepped: the copy steps with the neighbour's gradients. (A step outside a training step,
        as DCP's load makes to create the optimizer's state, is replayed as well, and counts no step.)"""
        self._step_copy()
        self._mine = None
        self.stepped = self.stepped or self.in_step

    def _step_copy_to(self, step: int) -> None:
        """The copy stepped on to ``step`` where the neighbour's gradients it holds take it there."""
        if self.copy is not None and self._pending is not None and self.copy_step + 1 == step:
            self._step_copy()

    def _step_copy(self) -> None:
        if self._pending is None or self.copy is None:
            return
        assert self._heard is not None
        copy_replay.replay(self.copy, self._pending, self.kind, self._heard.options)
        with torch.no_grad():
            for name, value in self._pending_buffers.items():
                self.copy.buffers[name].copy_(value)
        self.copy_step += 1
        self._pending, self._pending_buffers = None, {}

    def boundary(self, step: int) -> bool:
        """At the step boundary (``step`` done): whether a copy is missing, this rank's or its right neighbour's
        (the group's first step, a joiner's, one whose state grew): ``seed`` then sends it whole."""
        self.in_step = self.stepped = False
        if self.copy is not None:
            self.copy_step = step
        return not self.right_holds or self.copy is None

    def seed(self, ctx: DistContext, mine: KeptShard, step: int) -> None:
        """This rank's whole shard to its right neighbour, where it holds no copy of it; its left neighbour's
        received, where this rank holds none (each side knows what the other holds: they change together)."""
        right, left = neighbours(ctx)
        send, receive = not self.right_holds, self.copy is None
        coming = swap_bytes(
            pickle.dumps(layout_of(mine)) if send else None, right if send else None, left if receive else None
        )
        copy, flat, incoming = None, None, []
        if receive:
            copy, flat = allocate_flat(pickle.loads(coming), ctx.device)
            incoming = shard_chunks.layout_of(tensors_of(copy)).chunks
        outgoing = shard_chunks.Outgoing(tensors_of(mine), staging=self._staging) if send else None
        swap_chunks(ctx, flat, incoming, left, outgoing, right, "the neighbours' copies were")
        if send:
            self.right_holds = True
        if receive:
            self.copy, self.copy_step = copy, step

    def copy_of(self, step: int) -> KeptShard:
        """The left neighbour's shard as of ``step`` (``agree`` chose a step this rank holds it at)."""
        self._step_copy_to(step)
        if self.copy is None or self.copy_step != step:
            raise CopyError(f"no copy of step {step} is kept here")
        return self.copy

    def settle(self, ctx: DistContext, step: int, holdings: dict[int, Holding]) -> None:
        """At a re-form, the group carrying on from ``step``: the copy stepped on to it or let go of, and what the
        right neighbour holds, as the gathered ``holdings`` say (every member alike)."""
        self._step_copy_to(step)
        if self.copy is not None and self.copy_step != step:
            self.copy = None
        right = holdings[neighbours(ctx)[0]]
        self.right_holds = right.live >= 0 and step in (right.copy, right.received)
        self._pending, self._pending_buffers, self._mine = None, {}, None
        self._heard = self._told = None
        self.in_step = self.stepped = False
