"""In-place repair of a sharded model (FSDP2 in HSDP's layout): a lost rank's shard comes back from its replica.

Under HSDP over R replica groups of S ranks each, rank ``g * S + s`` holds shard ``s`` of every parameter and of
its optimizer state, and so does rank ``s`` of every other group. When a rank is lost, its place goes to a spare
with the same rank, and the spare's shard comes from the survivors that hold shard ``s``: with several of them
(R > 2), each sends its part of the tensors at once. No checkpoint is read; nothing is sent to the survivors,
who keep their own shards in memory.

A sharded model is bound to the group it was sharded over, so every member builds it again at each re-form:
``build()`` on the meta device (nothing initialised), sharded over the new group, then filled with the member's
own shard (kept in memory across the re-form) or the one it receives. The optimizer stays the same object, its
parameters and state pointed at the new model's, so that a learning-rate scheduler built on it stays valid.

What it cannot repair, it says, and the loop's error ends the member (the controller restarts the group, from a
checkpoint): every rank of one shard lost at once (no survivor holds it), survivors that stopped at different
steps (one completed a step its peers failed), and a group whose size changed (an elastic group's shards would
be laid out anew: use a fixed group).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from torchjob import worker_files
from torchjob.train import fsdp
from torchjob.train.context import DistContext
from torchjob.train.group_state import Restored


class ShardedRepairError(RuntimeError):
    """A sharded group that cannot be made whole in place (the controller restarts it instead)."""


@dataclass
class _Kept:
    """A member's own shard, kept across a re-form: plain tensors, holding no reference to the old group."""

    world: int
    params: dict[str, torch.Tensor] = field(default_factory=dict)  # the local shard of each parameter
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)  # buffers are whole on every rank
    optimizer: dict[str, dict[str, Any]] = field(default_factory=dict)  # each parameter's state, DTensors as local
    sharded_keys: dict[str, list[str]] = field(default_factory=dict)  # which of a parameter's state were DTensors
    groups: list[list[str]] = field(default_factory=list)  # the optimizer's parameter groups, by parameter name


class ShardedState:
    """``torchjob.train.group_state.GroupState`` for a model sharded in HSDP's layout (see the module)."""

    def __init__(
        self,
        ctx: DistContext,
        build: Callable[[], nn.Module],
        make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
        replicas: int,
        units: Callable[[nn.Module], Iterable[nn.Module]] | None = None,
    ) -> None:
        if os.environ.get(worker_files.ENV_ELASTIC):
            raise fsdp.ShardingError(
                "InPlaceTraining.sharded: an elastic group changes its size, and a sharded model's shards would be "
                "laid out anew; run it as a fixed group (minReplicas = maxReplicas)"
            )
        if replicas < 2:
            raise fsdp.ShardingError(
                f"InPlaceTraining.sharded: replicas={replicas}; a lost rank's shard must live on in another "
                "replica group, so repair in place needs replicas >= 2 (HSDP)"
            )
        fsdp.check_layout(ctx.world_size, replicas)  # without making a mesh: a joiner makes its own when it joins
        self.replicas = replicas
        self._build, self._make_optimizer, self._units = build, make_optimizer, units
        self._model: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._sharded: dict[str, nn.Parameter] = {}  # the model's sharded parameters, by name
        self._world = 0  # the number of ranks the model is sharded over
        self._kept: _Kept | None = None
        if not ctx.joined:  # a joiner builds its model when it joins (restore)
            self._model = self._shard(build(), fsdp.mesh_for(ctx, replicas))
            self._optimizer = make_optimizer(self._model)

    @property
    def model(self) -> nn.Module:
        if self._model is None:
            raise RuntimeError("the sharded model is being re-formed")
        return self._model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        if self._optimizer is None:
            raise RuntimeError("a joiner's optimizer is made when it joins")
        return self._optimizer

    def wrap(self, ctx: DistContext) -> nn.Module:
        return self.model

    def release(self) -> None:
        if self._model is None or self._optimizer is None:
            return  # nothing built since the last release
        optimizer = self._optimizer
        name_of = {id(p): name for name, p in self._sharded.items()}
        kept = _Kept(world=self._world)
        with torch.no_grad():
            # The optimizer's parameters, not the module's: a step that failed mid-forward leaves the module
            # holding its gathered (unsharded) parameters.
            for name, param in self._sharded.items():
                kept.params[name] = _local(param)
            kept.buffers = {name: buffer for name, buffer in self._model.named_buffers()}
            for owner, state in optimizer.state.items():
                name = name_of[id(owner)]
                kept.optimizer[name] = {k: _local(v) if isinstance(v, DTensor) else v for k, v in state.items()}
                kept.sharded_keys[name] = [k for k, v in state.items() if isinstance(v, DTensor)]
        kept.groups = [[name_of[id(p)] for p in group["params"]] for group in optimizer.param_groups]
        for group in optimizer.param_groups:
            group["params"] = []
        optimizer.state.clear()
        self._model, self._sharded, self._kept = None, {}, kept

    def restore(self, ctx: DistContext, has_state: bool, step: int) -> Restored:
        kept = self._kept
        if has_state and kept is not None and kept.world != ctx.world_size:
            raise ShardedRepairError(
                f"the group re-formed with {ctx.world_size} ranks, its model was sharded over {kept.world}: a sharded "
                "model is repaired in place only in a group of the same size"
            )
        holders, step = _holders(ctx, has_state, step)
        shards = ctx.world_size // self.replicas
        senders = _senders(holders, ctx.world_size, shards)
        mesh = fsdp.mesh_for(ctx, self.replicas)
        # build() may seed torch's generator: the survivors' random state must go on as if nothing happened.
        devices = [ctx.device.index] if ctx.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.device("meta"):
            built = self._build()
        model = self._shard(built, mesh)
        model.to_empty(device=ctx.device)
        new_buffers = dict(model.named_buffers())
        if has_state:
            assert kept is not None
            with torch.no_grad():
                for name, param in self._sharded.items():
                    _local(param).copy_(kept.params[name])
                for name, buffer in new_buffers.items():
                    buffer.copy_(kept.buffers[name])
        else:
            kept = self._receive(senders[ctx.rank], ctx.device, new_buffers)
        self._send(ctx.rank, senders, kept)
        if self._optimizer is None:
            self._optimizer = self._make_optimizer(model)
        _attach(self._optimizer, self._sharded, kept)
        self._model, self._kept = model, None
        return Restored(model, min(holders), step, _said(senders))

    def _shard(self, model: nn.Module, mesh: Any) -> nn.Module:
        units = list(self._units(model)) if self._units is not None else None
        fsdp.shard_on(model, mesh, units)
        self._sharded = dict(model.named_parameters())  # sharded now, before any forward gathers them
        self._world = int(mesh.size())
        return model

    def _send(self, rank: int, senders: dict[int, list[int]], kept: _Kept) -> None:
        """As a holder: each joiner whose shard this rank holds gets its part of the tensors (the first holder
        also sends what the joiner needs to know first: the optimizer's layout, the state tensors' shapes)."""
        pending = []
        for joiner, holders in senders.items():
            if rank not in holders:
                continue
            if rank == holders[0]:
                dist.send_object_list([_layout(kept)], dst=joiner)
            for index, tensor in enumerate(_tensors(kept)):
                if holders[index % len(holders)] == rank:
                    pending.append(dist.isend(tensor.contiguous(), dst=joiner))
        for work in pending:
            if work is not None:
                work.wait()

    def _receive(self, holders: list[int], device: torch.device, buffers: dict[str, torch.Tensor]) -> _Kept:
        """As a joiner: the shard the ``holders`` hold, into the new model's own tensors where it has them."""
        layout: list[Any] = [None]
        dist.recv_object_list(layout, src=holders[0])
        kept: _Kept = layout[0]
        kept.params = {name: _local(param) for name, param in self._sharded.items()}  # received in place
        kept.buffers = buffers
        for state in kept.optimizer.values():
            for key, value in state.items():
                if isinstance(value, _Placeholder):
                    state[key] = torch.empty(value.shape, dtype=value.dtype, device=device)
        pending = []
        began = time.monotonic()
        with torch.no_grad():
            tensors = _tensors(kept)
            for index, tensor in enumerate(tensors):
                pending.append(dist.irecv(tensor, src=holders[index % len(holders)]))
            for work in pending:
                if work is not None:
                    work.wait()
        size = sum(t.numel() * t.element_size() for t in tensors)
        print(
            f"torchjob: rank {dist.get_rank()}: received its shard ({size / 1e9:.2f} GB) from rank"
            f"{'s' if len(holders) > 1 else ''} {', '.join(map(str, holders))} in {time.monotonic() - began:.2f} s",
            flush=True,
        )
        return kept


@dataclass(frozen=True)
class _Placeholder:
    """An optimizer state tensor a joiner is about to receive: its shape and type."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def _local(value: Any) -> torch.Tensor:
    local: torch.Tensor = value.to_local() if isinstance(value, DTensor) else value
    return local.detach()


def _holders(ctx: DistContext, has_state: bool, step: int) -> tuple[dict[int, int], int]:
    """Which ranks hold their shard, and at which step (one all-gather of two integers); every rank raises
    alike when the group cannot be made whole."""
    mine = torch.tensor([int(has_state), step], dtype=torch.int64, device=ctx.device)
    table = [torch.zeros_like(mine) for _ in range(ctx.world_size)]
    dist.all_gather(table, mine)
    holders = {rank: int(row[1]) for rank, row in enumerate(table) if int(row[0])}
    if not holders:
        raise ShardedRepairError("no member of the re-formed group holds its shard of the model")
    steps = sorted(set(holders.values()))
    if len(steps) > 1:
        raise ShardedRepairError(
            f"the survivors stopped at different steps ({', '.join(map(str, steps))}): one completed a step the "
            "others failed, and a sharded model cannot be made whole in place from that"
        )
    return holders, steps[0]


def _senders(holders: dict[int, int], world: int, shards: int) -> dict[int, list[int]]:
    """For each joiner, the holders of its shard (the same shard index in every other replica group)."""
    senders: dict[int, list[int]] = {}
    for joiner in range(world):
        if joiner in holders:
            continue
        found = [rank for rank in sorted(holders) if rank % shards == joiner % shards]
        if not found:
            raise ShardedRepairError(
                f"no survivor holds shard {joiner % shards} (every replica group lost that rank at once); the "
                "group restarts from its checkpoint"
            )
        senders[joiner] = found
    return senders


def _said(senders: dict[int, list[int]]) -> str:
    if not senders:
        return "every rank kept its shard"
    return "; ".join(
        f"rank {joiner}'s shard from rank{'s' if len(holders) > 1 else ''} {', '.join(map(str, holders))}"
        for joiner, holders in sorted(senders.items())
    )


def _layout(kept: _Kept) -> _Kept:
    """What a joiner is told before the tensors: everything but them (placeholders in their places)."""
    optimizer = {
        name: {
            key: _Placeholder(tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v for key, v in state.items()
        }
        for name, state in kept.optimizer.items()
    }
    return _Kept(
        world=kept.world,
        optimizer=optimizer,
        sharded_keys=kept.sharded_keys,
        groups=kept.groups,
    )


def _tensors(kept: _Kept) -> list[torch.Tensor]:
    """Every tensor of a member's state, in the order holders send them and joiners receive them."""
    found = [kept.params[name] for name in sorted(kept.params)]
    found += [kept.buffers[name] for name in sorted(kept.buffers)]
    for name in sorted(kept.optimizer):
        state = kept.optimizer[name]
        found += [state[key] for key in sorted(state) if isinstance(state[key], torch.Tensor)]
    return found


def _attach(optimizer: torch.optim.Optimizer, sharded: dict[str, nn.Parameter], kept: _Kept) -> None:
    """Point ``optimizer`` at the new model's parameters, with the state ``kept`` holds, laid out on the new
    mesh."""
    if len(kept.groups) != len(optimizer.param_groups):
        raise ShardedRepairError(
            f"make_optimizer made {len(optimizer.param_groups)} parameter groups, the group's optimizer has "
            f"{len(kept.groups)}"
        )
    for group, names in zip(optimizer.param_groups, kept.groups, strict=True):
        group["params"] = [sharded[name] for name in names]
    optimizer.state.clear()
    for name, state in kept.optimizer.items():
        param: Any = sharded[name]  # a DTensor
        placed = dict(state)
        for key in kept.sharded_keys.get(name, []):
            placed[key] = DTensor.from_local(
                state[key],
                param.device_mesh,
                param.placements,
                run_check=False,
                shape=param.shape,
                stride=param.stride(),
            )
        optimizer.state[param] = placed
