"""What a group under in-place repair (torchjob.train.in_place) holds, and how a re-formed group gets it back.

The repair loop is the same for every kind of model; what differs is the state each member holds and where a
joiner's comes from. ``ReplicatedState`` is DDP's: every member holds the whole model and optimizer, so the
lowest survivor broadcasts them and every member wraps the model in a new DDP. A sharded model's is
``torchjob.train.sharded_in_place.ShardedState``: every member holds only its shard, and a joiner's comes from a
survivor holding the same shard (its HSDP replica) or a copy of it (its neighbour, under plain FSDP).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torchjob.train.context import DistContext


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
    """DDP: every member holds the whole state; a joiner gets it from the lowest survivor by broadcast."""

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
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        options = {"init_sync": init_sync, **self.ddp_options}
        return DistributedDataParallel(self._model, device_ids=device_ids, **options)

    def after_step(self, ctx: DistContext, step: int) -> None:
        """Nothing to do: every member holds the whole state."""

    def release(self) -> None:
        """Nothing to do: only the DDP wrapper (the step function's module, which the loop drops) holds the
        group."""

    def restore(self, ctx: DistContext, has_state: bool, step: int) -> Restored:
        """The state from the lowest rank that has it (a survivor; not a joiner, even one promoted in a
        generation that never formed: ``DistContext.holder``, said at the store as the generation formed), then a
        new DDP."""
        source = ctx.world_size if ctx.holder is None else ctx.holder
        if source == ctx.world_size:
            raise RuntimeError("no member of the repaired group holds the training state")
        state: list[Any] = [
            {"model": self._model.state_dict(), "optimizer": self._optimizer.state_dict(), "step": step}
        ]
        dist.broadcast_object_list(state, src=source)
        self._model.load_state_dict(state[0]["model"])
        self._optimizer.load_state_dict(state[0]["optimizer"])
        # Every member now holds the same state: DDP's own check of shapes and broadcast of the model at start
        # would only repeat what was just sent.
        return Restored(self.wrap(ctx, init_sync=False), source, int(state[0]["step"]), f"state from rank {source}")
