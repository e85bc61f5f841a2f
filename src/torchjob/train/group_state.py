"""What a group under in-place repair (torchjob.train.in_place) holds, and how a re-formed group gets it back.

The repair loop is the same for every kind of model; what differs is the state each member holds and where a
joiner's comes from. ``ReplicatedState`` is DDP's: every member holds the whole model and optimizer, so a
joiner's come from every survivor at once and every member wraps the model in a new DDP. A sharded model's is
``torchjob.train.sharded_in_place.ShardedState``: every member holds only its shard, and a joiner's comes from a
survivor holding the same shard (its HSDP replica) or a copy of it (its neighbour, under plain FSDP).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import torch
from torch import nn

from torchjob.train import ddp, state_transfer
from torchjob.train.context import DistContext
from torchjob.train.kept_shard import KeptShard, shard_of


class Restored(NamedTuple):
    """A member's state after a re-form."""

    module: nn.Module  # what the step function is given
    reporter: int  # the rank that speaks for the re-form: the lowest one whose state was kept
    step: int  # the step the group carries on from
    source: str  # where a joiner's state came from, as the reporter says it


class GroupState(Protocol):
    """The training state a member of a group under in-place repair holds."""

    @property
    def model(self) -> nn.Module:
        """The model as the script uses it outside a step (DDP's unwrapped; a sharded model as it is now)."""

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer: the same object across re-forms, so that a scheduler built on it stays valid."""

    def wrap(self, ctx: DistContext) -> nn.Module:
        """The module the step function is given, in the group's first generation (every member holds state)."""

    def before_step(self, ctx: DistContext, step: int) -> None:
        """As step ``step`` (the steps done so far) begins: its optimizer steps are the step's own (a sharded
        model's replayed copies tell them from those of a checkpoint's load)."""

    def after_step(self, ctx: DistContext, step: int) -> None:
        """After each step that completed (``step``: the steps done so far), before the next: whatever keeps a
        lost member's state restorable (a sharded model's neighbour copies). Raises as a step does when a peer
        is lost."""

    def release(self) -> None:
        """Before the old group goes: drop every reference to it (a group kept alive keeps its sockets open,
        and the other survivors wait on them), keeping the state itself."""

    def restore(self, ctx: DistContext, has_state: bool, step: int) -> Restored:
        """Every member of a new generation, joiners included (``has_state`` False): bring every member's state
        to the group's, then wrap it."""


class ReplicatedState:
    """DDP: every member holds the whole state; a joiner gets it from every survivor at once."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, ddp_options: dict[str, Any]) -> None:
        self._model = model
        self._optimizer = optimizer
        self.ddp_options = ddp_options

    @property
    def model(self) -> nn.Module:
        return self._model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self._optimizer

    def wrap(self, ctx: DistContext, init_sync: bool = True) -> nn.Module:
        return ddp.wrap(self._model, ctx, **{"init_sync": init_sync, **self.ddp_options})

    def before_step(self, ctx: DistContext, step: int) -> None:
        """Nothing to do: every member holds the whole state."""

    def after_step(self, ctx: DistContext, step: int) -> None:
        """Nothing to do: every member holds the whole state."""

    def release(self) -> None:
        """Only the DDP wrapper (the step function's module, which the loop drops) holds the group. The gradients
        go too: the step they are of failed, or is done (the next one zeroes them), and as views of the old DDP's
        buckets (``gradient_as_bucket_view``) they would keep those alive and be copied into the new DDP's."""
        for param in self._model.parameters():
            param.grad = None

    def restore(self, ctx: DistContext, has_state: bool, step: int) -> Restored:
        """Each joiner's state (a spare's, or a survivor's at another step than the group's) from every member
        holding the group's, at once (state_transfer.py), then a new DDP. The group carries on from the step of the
        lowest rank that holds state (``DistContext.holder`` where the store said one as the generation formed:
        not a joiner, even one promoted in a generation that never formed); the members at that step are the
        holders, and nothing is sent to them."""
        table = state_transfer.gathered(ctx, (int(has_state), step))
        reporter, at, senders = whole_state_senders(table, ctx.holder)
        holders = [rank for rank in range(ctx.world_size) if rank not in senders]
        params = dict(self._model.named_parameters())
        buffers = dict(self._model.named_buffers())
        if ctx.rank in holders:
            state_transfer.send(ctx.rank, senders, shard_of(params, self._optimizer, ctx.world_size, buffers))
        else:
            into = {name: param.detach() for name, param in params.items()}  # the parameters' own storage
            self._attach(params, state_transfer.receive_started(holders, ctx.device, into, buffers)())
        # Every member now holds the same state: DDP's own check of shapes and broadcast of the model at start
        # would only repeat what was just sent.
        return Restored(self.wrap(ctx, init_sync=False), reporter, at, state_transfer.said(senders, "state"))

    def _attach(self, params: dict[str, nn.Parameter], kept: KeptShard) -> None:
        """The optimizer's state and options as ``kept`` holds them, on this member's own parameters."""
        optimizer = self._optimizer
        if [[id(p) for p in group["params"]] for group in optimizer.param_groups] != [
            [id(params[name]) for name in names] for names in kept.groups
        ]:
            raise RuntimeError(
                "the optimizer's parameter groups are not the group's: make the optimizer the same way on every member"
            )
        for group, options in zip(optimizer.param_groups, kept.options, strict=True):
            group.update(options)
        optimizer.state.clear()
        for name, state in kept.optimizer.items():
            optimizer.state[params[name]] = state


def whole_state_senders(table: list[tuple[int, ...]], holder: int | None) -> tuple[int, int, dict[int, list[int]]]:
    """From each rank's (holds state, step) after a re-form: the reporter (``holder`` where it holds state, else
    the lowest rank that does), the step the group carries on from (the reporter's), and each joiner's holders
    (every rank holding state at that step)."""
    holding = [rank for rank, (held, _) in enumerate(table) if held]
    if not holding:
        raise RuntimeError("no member of the repaired group holds the training state")
    reporter = holder if holder in holding else holding[0]
    at = table[reporter][1]
    holders = [rank for rank in holding if table[rank][1] == at]
    return reporter, at, {rank: holders for rank in range(len(table)) if rank not in holders}
