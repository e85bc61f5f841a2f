"""Sharded data parallelism: FSDP2 (``torch.distributed.fsdp.fully_shard``) over a DeviceMesh, and HSDP.

When a model no longer fits a device beside its gradients and Adam's two moments, each rank keeps only a shard
of every parameter, gradient and optimizer state, and gathers a layer's full weights just for its forward and
backward. ``shard_model(model, ctx)`` does that over every rank (FSDP); ``replicas=R`` over an R × (world / R)
mesh (HSDP: sharded within each group of world / R ranks, replicated across the R groups, so a lost rank's
shard still lives in R − 1 other groups). Each of the model's units (by default every direct child module that
holds parameters: a transformer's blocks, if its root holds them in a ``ModuleList``, are named by ``units``) is
sharded on its own, so that only one unit's full weights exist at a time, then the root.

Works on gloo (CPU: its all-gathers and reduce-scatters sent between peers, ``peer_collectives``) and NCCL
(GPU) alike, not on gloo with the model on a GPU (``check_device``); DDP (``torchjob.train.wrap``) stays the
default for models that fit. The optimizer is built from the sharded model's
parameters, after ``shard_model``. Data is split over every rank as with DDP (``BatchPlan``): each rank trains on
its own samples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from torchjob.train import shared_memory
from torchjob.train.context import DistContext
from torchjob.train.shared_memory import SharedMemoryGather

REPLICATE, SHARD = "replicate", "shard"


class ShardingError(ValueError):
    """The group cannot be laid out as asked (a world size that the replicas do not divide)."""


def mesh_for(ctx: DistContext, replicas: int = 1) -> DeviceMesh:
    """The device mesh ``shard_model`` uses: 1-D over every rank (``shard``), or ``replicas`` × (world /
    ``replicas``) (``replicate``, ``shard``) for HSDP."""
    world = ctx.world_size
    check_layout(world, replicas)
    check_device(ctx)
    if replicas == 1:
        return init_device_mesh(ctx.device.type, (world,), mesh_dim_names=(SHARD,))
    return init_device_mesh(ctx.device.type, (replicas, world // replicas), mesh_dim_names=(REPLICATE, SHARD))


def check_layout(world: int, replicas: int) -> None:
    """Refuse a number of replica groups that does not divide the world size (``ShardingError``)."""
    if replicas < 1 or world % replicas:
        raise ShardingError(
            f"replicas={replicas}: HSDP needs a number of replica groups that divides the world size ({world})"
        )


def check_device(ctx: DistContext) -> None:
    """Refuse a sharded model on a GPU under a group without NCCL (``ShardingError``): there gloo carries FSDP2's
    reduce-scatters of CUDA tensors, and every rank died of it (SIGSEGV in the first backward; torch 2.11, two
    ranks sharing one H200). DDP over such a group trains (its all-reduce takes CUDA tensors)."""
    if ctx.device.type == "cuda" and "nccl" not in ctx.backend:
        raise ShardingError(
            f"a sharded model on {ctx.device} needs NCCL, and this group has {ctx.backend!r} (more processes than "
            "GPUs on this machine?): give each rank a GPU of its own, or shard on the CPU (CUDA_VISIBLE_DEVICES=)"
        )


def shard_model(
    model: nn.Module,
    ctx: DistContext,
    replicas: int = 1,
    units: Iterable[nn.Module] | None = None,
    reshard_after_forward: bool = True,
) -> nn.Module:
    """Move ``model`` to this rank's device and shard it (FSDP2; HSDP where ``replicas`` > 1), unit by unit, then
    the root. Returns the same module, its parameters now DTensors; rank 0's initial weights are not broadcast
    (as with FSDP2 itself): build the model from the same seed on every rank, or load a checkpoint after.

    ``reshard_after_forward=False`` keeps each unit's gathered weights from its forward to its backward (FSDP2's
    option of that name): one all-gather per unit and step instead of two, for the whole model's weights in
    memory during the backward. Under HSDP, where the replica groups hold copies of every shard anyway and the
    shard groups are small, that is often the better trade. The last of ``units`` (give them in the order the
    forward runs them) and the root keep theirs either way (``_frees_after_forward``)."""
    model = model.to(ctx.device)
    return shard_on(model, mesh_for(ctx, replicas), units, reshard_after_forward)


def shard_on(
    model: nn.Module,
    mesh: DeviceMesh,
    units: Iterable[nn.Module] | None = None,
    reshard_after_forward: bool = True,
) -> nn.Module:
    """Shard ``model`` where it is (FSDP2 over ``mesh``), unit by unit, then the root: ``shard_model`` without the
    move to a device, for a model built on the meta device (torchjob.train.sharded_in_place)."""
    chosen = list(units) if units is not None else _default_units(model)
    shared = _shared_memory(mesh)
    for unit in chosen:
        _shard(unit, mesh, _frees_after_forward(unit, chosen, reshard_after_forward), shared)
    _shard(model, mesh, False, shared)
    return model


def build_sharded(
    build: Callable[[], nn.Module],
    ctx: DistContext,
    replicas: int = 1,
    units: Callable[[nn.Module], Iterable[nn.Module]] | None = None,
    reshard_after_forward: bool = True,
    initialise: bool = True,
) -> nn.Module:
    """``shard_model(build(), ...)`` without the whole model in any rank's memory, for a model too large for that
    on every rank at once (4 ranks of a 1B-parameter model on one machine would hold 16 GB before sharding).

    ``build()`` runs on the meta device (nothing is allocated, torch's generator is not drawn from); then each
    module is given memory on this rank's device and its own ``reset_parameters()`` is called, in the order
    ``build()`` made them, so the weights are those ``build()`` would have made eagerly from the same seed; each
    unit (``units(model)``, as in ``shard_model``) is sharded as soon as it is filled, so only one unit's full
    weights exist at a time, and the root's own parameters last. A module holding parameters of its own without
    ``reset_parameters()`` is refused (``ShardingError``): build that model eagerly and use ``shard_model``.

    ``initialise=False`` gives each module its memory and leaves it unfilled, for a model a checkpoint is loaded
    into next: at 1B parameters, filling them is tens of seconds of every rank's CPU that the load overwrites."""
    with torch.device("meta"):
        model = build()
    holders = [(name, module) for name, module in model.named_modules() if _holds_own(module)]
    if initialise:
        for name, module in holders:
            if getattr(module, "reset_parameters", None) is None:
                raise ShardingError(
                    f"build_sharded: module {name or type(module).__name__!r} holds parameters of its own but has no "
                    "reset_parameters() to fill them; build the model eagerly and use shard_model"
                )
    chosen = list(units(model)) if units is not None else _default_units(model)
    mesh = mesh_for(ctx, replicas)
    shared = _shared_memory(mesh)
    pending = {id(unit) for unit in chosen}

    def fill(module: nn.Module) -> None:
        if _holds_own(module):
            module.to_empty(device=ctx.device, recurse=False)
            if initialise:
                with torch.no_grad():
                    module.reset_parameters()  # type: ignore[operator]
        for child in module.children():
            fill(child)
        if id(module) in pending:
            _shard(module, mesh, _frees_after_forward(module, chosen, reshard_after_forward), shared)

    fill(model)
    _shard(model, mesh, False, shared)
    return model


def _shared_memory(mesh: DeviceMesh) -> SharedMemoryGather | None:
    """One model's all-gathers through shared memory between ranks of one machine, on the CPU (shared_memory.py:
    a group uses it where every rank offers it, as each does unless ``TORCHJOB_SHARED_MEMORY=0``)."""
    return SharedMemoryGather(shared_memory.enabled()) if mesh.device_type == "cpu" else None


def _shard(module: nn.Module, mesh: DeviceMesh, reshard_after_forward: bool, shared: SharedMemoryGather | None) -> None:
    """``fully_shard`` one unit; on the CPU, its all-gathers and reduce-scatters sent between peers
    (peer_collectives.py), where gloo's own reduce-scatter moves the whole unit, and its all-gathers through
    ``shared`` memory where the group's ranks can share it."""
    sharded = fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward)
    if mesh.device_type == "cpu" and hasattr(sharded, "set_custom_reduce_scatter"):
        try:
            from torchjob.train.peer_collectives import use_peer_collectives
        except ImportError:  # a torch whose FSDP2 names its custom collectives otherwise: gloo's own
            return
        use_peer_collectives(sharded, shared)


def _frees_after_forward(unit: nn.Module, units: list[nn.Module], reshard_after_forward: bool) -> bool:
    """Whether ``unit``'s gathered weights are freed after its forward. Never the last unit's (``units`` are in the
    order the forward runs them) nor the root's: the backward begins with them, so freeing them would only gather
    them again at once, one all-gather more a step for no lower peak (the root is FSDP2's own default; the last
    block kept as torchtitan keeps it)."""
    return reshard_after_forward and unit is not units[-1]


def _holds_own(module: nn.Module) -> bool:
    """Whether ``module`` holds parameters or buffers of its own (not only through its children)."""
    return any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False))


def _default_units(model: nn.Module) -> list[nn.Module]:
    return [child for child in model.children() if any(True for _ in child.parameters())]


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model``'s parameters are sharded (DTensors), as ``shard_model`` leaves them."""
    return any(isinstance(p, DTensor) for p in model.parameters())
