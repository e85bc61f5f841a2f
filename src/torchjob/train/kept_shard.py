"""A member's shard of a sharded model as plain tensors: what it keeps across a re-form, what a neighbour keeps a
copy of, and what is sent to a joiner (sharded_in_place.py, shard_copies.py, state_transfer.py; under DDP the
whole model and optimizer, as one "shard").

Plain tensors hold no reference to the group the model was sharded over, so they outlive it. Sending one takes
two messages: its layout first (everything but the tensors, each tensor a ``Placeholder``: a pickle of a few
kB), then the tensors themselves, in ``tensors_of``'s order on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from torchjob.train import shard_chunks


@dataclass
class KeptShard:
    """One rank's shard of the model and its optimizer's state."""

    world: int  # the number of ranks the model was sharded over
    params: dict[str, torch.Tensor] = field(default_factory=dict)  # the local shard of each parameter
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)  # buffers are whole on every rank
    optimizer: dict[str, dict[str, Any]] = field(default_factory=dict)  # each parameter's state, DTensors as local
    sharded_keys: dict[str, list[str]] = field(default_factory=dict)  # which of a parameter's state were DTensors
    groups: list[list[str]] = field(default_factory=list)  # the optimizer's parameter groups, by parameter name
    # Each parameter group's options (learning rate...: a scheduler's changes too), without its parameters.
    options: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Placeholder:
    """A tensor about to be received: its shape and type."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def local(value: Any) -> torch.Tensor:
    """A parameter's or a state tensor's local shard (a plain tensor as it is)."""
    found: torch.Tensor = value.to_local() if isinstance(value, DTensor) else value
    return found.detach()


def shard_of(
    sharded: dict[str, nn.Parameter], optimizer: torch.optim.Optimizer, world: int, buffers: dict[str, torch.Tensor]
) -> KeptShard:
    """This rank's shard as it is now: views of the live tensors, not copies. ``sharded``: the model's sharded
    parameters by name, as the optimizer holds them (a step that failed mid-forward leaves the module holding
    gathered ones)."""
    name_of = {id(p): name for name, p in sharded.items()}
    kept = KeptShard(world=world, buffers=dict(buffers))
    with torch.no_grad():
        for name, param in sharded.items():
            kept.params[name] = local(param)
        for owner, state in optimizer.state.items():
            name = name_of[id(owner)]
            kept.optimizer[name] = {k: local(v) if isinstance(v, DTensor) else v for k, v in state.items()}
            kept.sharded_keys[name] = [k for k, v in state.items() if isinstance(v, DTensor)]
    kept.groups = [[name_of[id(p)] for p in group["params"]] for group in optimizer.param_groups]
    kept.options = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    return kept


def layout_of(kept: KeptShard) -> KeptShard:
    """What a receiver is told before the tensors: everything but them, placeholders in their places."""
    optimizer = {
        name: {key: _placeholder(v) if isinstance(v, torch.Tensor) else v for key, v in state.items()}
        for name, state in kept.optimizer.items()
    }
    params: dict[str, Any] = {name: _placeholder(t) for name, t in kept.params.items()}
    buffers: dict[str, Any] = {name: _placeholder(t) for name, t in kept.buffers.items()}
    return KeptShard(
        world=kept.world,
        params=params,
        buffers=buffers,
        optimizer=optimizer,
        sharded_keys=kept.sharded_keys,
        groups=kept.groups,
        options=kept.options,
    )


def allocate(layout: KeptShard, device: torch.device) -> KeptShard:
    """Empty tensors in every placeholder's place, to receive into."""
    kept = KeptShard(world=layout.world, sharded_keys=layout.sharded_keys, groups=layout.groups, options=layout.options)
    kept.params = {name: _empty(p, device) for name, p in layout.params.items()}
    kept.buffers = {name: _empty(b, device) for name, b in layout.buffers.items()}
    kept.optimizer = {
        name: {key: _empty(v, device) if isinstance(v, Placeholder) else v for key, v in state.items()}
        for name, state in layout.optimizer.items()
    }
    return kept


def tensors_of(kept: KeptShard) -> list[torch.Tensor]:
    """Every tensor of a shard, in the order senders send them and receivers receive them."""
    return [place[key] for place, key in _slots(kept)]


def allocate_flat(layout: KeptShard, device: torch.device) -> tuple[KeptShard, torch.Tensor]:
    """``allocate``, every tensor a view of one flat uint8 buffer (returned with it) laid out as
    ``shard_chunks.layout`` lays out ``tensors_of``'s: what is received into the buffer is received into them."""
    kept = allocate(layout, torch.device("meta"))
    slots = _slots(kept)
    specs = [(place[key].shape, place[key].dtype) for place, key in slots]
    placed = shard_chunks.layout(specs)
    flat = torch.empty(placed.total, dtype=torch.uint8, device=device)
    for (place, key), view in zip(slots, shard_chunks.views(flat, specs, placed), strict=True):
        place[key] = view
    return kept, flat


def _slots(kept: KeptShard) -> list[tuple[dict[str, Any], str]]:
    """Where each tensor of a shard is held (its dict and key), in ``tensors_of``'s order."""
    found: list[tuple[dict[str, Any], str]] = [(kept.params, name) for name in sorted(kept.params)]
    found += [(kept.buffers, name) for name in sorted(kept.buffers)]
    for name in sorted(kept.optimizer):
        state = kept.optimizer[name]
        found += [(state, key) for key in sorted(state) if isinstance(state[key], torch.Tensor)]
    return found


def cloned(kept: KeptShard) -> KeptShard:
    """A shard of tensors of its own (``shard_of``'s are views of the live ones)."""
    return KeptShard(
        world=kept.world,
        params={name: t.clone() for name, t in kept.params.items()},
        buffers={name: t.clone() for name, t in kept.buffers.items()},
        optimizer={
            name: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
            for name, state in kept.optimizer.items()
        },
        sharded_keys={name: list(keys) for name, keys in kept.sharded_keys.items()},
        groups=[list(group) for group in kept.groups],
        options=[dict(options) for options in kept.options],
    )


def copied_into(target: KeptShard, source: KeptShard) -> KeptShard:
    """``target`` (of ``source``'s shapes: ``shapes_of``) holding ``source``'s values, tensors and the rest: a copy
    into memory already held, where ``cloned`` allocates anew."""
    with torch.no_grad():
        for kept, value in zip(tensors_of(target), tensors_of(source), strict=True):
            kept.copy_(value)
    for name, state in source.optimizer.items():
        for key, value in state.items():
            if not isinstance(value, torch.Tensor):
                target.optimizer[name][key] = value
    target.options = [dict(options) for options in source.options]
    return target


def shapes_of(kept: KeptShard) -> list[tuple[str, tuple[int, ...]]]:
    """A shard's tensors by name and shape, a layout's placeholders too: whether one can be received into another."""
    found = [(name, tuple(t.shape)) for name, t in kept.params.items()]
    found += [(name, tuple(t.shape)) for name, t in kept.buffers.items()]
    for name, state in kept.optimizer.items():
        found += [
            (f"{name}.{key}", tuple(v.shape)) for key, v in state.items() if isinstance(v, torch.Tensor | Placeholder)
        ]
    return found


def size_of(tensors: list[torch.Tensor]) -> int:
    """Bytes."""
    return sum(t.numel() * t.element_size() for t in tensors)


def _placeholder(tensor: torch.Tensor) -> Placeholder:
    return Placeholder(tuple(tensor.shape), tensor.dtype)


def _empty(value: Any, device: torch.device) -> torch.Tensor:
    assert isinstance(value, Placeholder)
    return torch.empty(value.shape, dtype=value.dtype, device=device)


def wait_all(*works: dist.Work | None) -> None:
    """Wait for each of a shard's sends and receives (None: nothing was posted)."""
    for work in works:
        if work is not None:
            work.wait()
