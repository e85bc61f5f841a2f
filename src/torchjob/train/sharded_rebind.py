"""Moving a sharded model (FSDP2) onto a re-formed group's process groups, where building it anew is not needed.

A re-form makes new process groups, and FSDP2 offers no way to move a model onto them: building it again (meta,
``fully_shard``, its memory given, its shard copied in) cost every member 0.3-0.5 s of CPU at once at each repair
of the GPT example (4 ranks on 2 cores), the joiner's build among them. Where a survivor keeps its rank and the
group its size, its shards are laid out exactly as they would be over the new group; only the groups differ.
FSDP2 finds them in two places: the DeviceMesh, by group name (``_dim_group_names``, resolved by torch's registry
of groups), and each parameter group's mesh info, which looked its groups up once, when it was made.

``let_go`` puts the model back as before the failed step (FSDP2's own ``reset_iter_state``: resharded, the
step's gathers and reductions dropped; it waits on a gather still in flight, which FSDP2 makes only where a script
asked for asynchronous unshards) and drops every reference it holds to the old groups: their connections close
only once nothing holds them (generations.leave_group). ``rebind`` points the same mesh at the new mesh's
groups and has every mesh info look them up again. Both touch attributes of torch's own (as of torch 2.15);
where they are not found, ``let_go`` says so and the member builds its model anew.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule

# What the mesh and the mesh infos hold of their groups (torch 2.15's names).
MESH_GROUPS = ("_dim_group_names", "_pg_registry")
INFO_GROUPS = ("shard_process_group", "replicate_process_group", "reduce_scatter_process_group")


def let_go(model: nn.Module, mesh: DeviceMesh) -> bool:
    """``model`` (the root of a ``fully_shard``ed model, over ``mesh``) as before the step that failed, holding no
    reference to its groups; False where that cannot be done (another torch, a reset FSDP2 refused): the model is
    to be dropped and built anew."""
    if not isinstance(model, FSDPModule) or not all(hasattr(mesh, name) for name in MESH_GROUPS):
        return False
    try:
        infos = _mesh_infos(model)
        if not infos:
            return False
        model.reset_iter_state()  # torch >= 2.15
    except (RuntimeError, AttributeError):
        return False
    mesh._pg_registry = {}
    for info in infos:
        for name in INFO_GROUPS:
            if hasattr(info, name):
                setattr(info, name, None)
    return True


def rebind(model: nn.Module, mesh: DeviceMesh, new_mesh: DeviceMesh) -> bool:
    """``model``, let go of (``let_go``) and sharded over ``mesh``, onto ``new_mesh``'s groups; False (nothing
    done) where ``new_mesh`` has another shape or this rank another place in it: its shard is not the one held."""
    if mesh.shape != new_mesh.shape or mesh.get_coordinate() != new_mesh.get_coordinate():
        return False
    mesh._dim_group_names = list(new_mesh._dim_group_names)
    mesh._pg_registry = dict(new_mesh._pg_registry)
    for info in _mesh_infos(model):
        info.__post_init__()  # looks its groups up again, through the mesh
    return True


def _mesh_infos(model: nn.Module) -> list[Any]:
    """Every distinct mesh info of the model's FSDP parameter groups and of their parameters."""
    found: dict[int, Any] = {}
    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        for group in module._get_fsdp_state()._fsdp_param_groups:
            owners = [group, *group.fsdp_params]
            for owner in owners:
                for info in (getattr(owner, "mesh_info", None), getattr(owner, "post_forward_mesh_info", None)):
                    if info is not None:
                        found[id(info)] = info
    return list(found.values())
