"""Sharded data parallelism: FSDP2 (``torch.distributed.fsdp.fully_shard``) over a DeviceMesh, and HSDP.

When a model no longer fits a device beside its gradients and Adam's two moments, each rank keeps only a shard
of every parameter, gradient and optimizer state, and gathers a layer's full weights just for its forward and
backward. ``shard_model(model, ctx)`` does that over every rank (FSDP); ``replicas=R`` over an R × (world / R)
mesh (HSDP: sharded within each group of world / R ranks, replicated across the R groups, so a lost rank's
shard still lives in R − 1 other groups). Each of the model's units (by default every direct child module that
holds parameters: a transformer's blocks, if its root holds them in a ``ModuleList``, are named by ``units``) is
sharded on its own, so that only one unit's full weights exist at a time, then the root.

Works on gloo (CPU) and NCCL (GPU) alike; DDP (``torchjob.train.wrap``) stays the default for models that fit.
The optimizer is built from the sharded model's parameters, after ``shard_model``. Data is split over every rank
as with DDP (``BatchPlan``): each rank trains on its own samples.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from torchjob.train.context import DistContext

REPLICATE, SHARD = "replicate", "shard"


class ShardingError(ValueError):
    """The group cannot be laid out as asked (a world size that the replicas do not divide)."""


def mesh_for(ctx: DistContext, replicas: int = 1) -> DeviceMesh:
    """The device mesh ``shard_model`` uses: 1-D over every rank (``shard``), or ``replicas`` × (world /
    ``replicas``) (``replicate``, ``shard``) for HSDP."""
    world = ctx.world_size
    check_layout(world, replicas)
    if replicas == 1:
        return init_device_mesh(ctx.device.type, (world,), mesh_dim_names=(SHARD,))
    return init_device_mesh(ctx.device.type, (replicas, world // replicas), mesh_dim_names=(REPLICATE, SHARD))


def check_layout(world: int, replicas: int) -> None:
    """Refuse a number of replica groups that does not divide the world size (``ShardingError``)."""
    if replicas < 1 or world % replicas:
        raise ShardingError(
            f"replicas={replicas}: HSDP needs a number of replica groups that divides the world size ({world})"
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
    shard groups are small, that is often the better trade."""
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
    chosen = list(units) if units is not None else [c for c in model.children() if any(True for _ in c.parameters())]
    for unit in chosen:
        fully_shard(unit, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return model


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model``'s parameters are sharded (DTensors), as ``shard_model`` leaves them."""
    return any(isinstance(p, DTensor) for p in model.parameters())
