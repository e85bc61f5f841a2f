"""Which backend and device a rank takes: every rank of a machine decides alike, from numbers they all read."""

from __future__ import annotations

import pytest

from torchjob.train.devices import WITH_NCCL, GpuShareError, plan_device
from torchjob.train.env import LaunchInfo


def _info(rank: int, world: int, local_rank: int = 0, local_world: int = 1, launcher: str = "torchjob") -> LaunchInfo:
    return LaunchInfo(launcher, rank, world, local_rank, local_world, "127.0.0.1", 29500)


def test_without_a_gpu_every_rank_takes_gloo_on_the_cpu_or_the_backend_it_names() -> None:
    assert plan_device(_info(0, 3), 0, {}).describe() == "gloo on cpu"
    assert plan_device(_info(0, 3), 0, {}, backend="mpi").describe() == "mpi on cpu"


def test_a_pod_with_a_gpu_a_process_takes_nccl_each_rank_on_its_local_rank() -> None:
    plans = [plan_device(_info(8 + r, 16, r, 4, "torchrun"), 4, {}) for r in range(4)]
    assert [p.describe() for p in plans] == [f"{WITH_NCCL} on cuda:{r}" for r in range(4)]


def test_more_local_processes_than_gpus_take_gloo_all_of_them_over_the_shared_gpus() -> None:
    # Before: local rank 0 took NCCL and ranks 1-3 gloo, and the group waited forever at its first collective.
    plans = [plan_device(_info(r, 4, r, 4, "torchrun"), 2, {}) for r in range(4)]
    assert [p.describe() for p in plans] == ["gloo on cuda:0", "gloo on cuda:1", "gloo on cuda:0", "gloo on cuda:1"]


def test_the_local_backend_runs_the_whole_group_on_one_machine_so_ranks_share_its_gpus_by_rank() -> None:
    env = {"TORCHJOB_MACHINE_PROCESSES": "3"}
    assert [plan_device(_info(r, 3), 1, env).describe() for r in range(3)] == ["gloo on cuda:0"] * 3
    assert [plan_device(_info(r, 3), 4, env).describe() for r in range(3)] == [
        f"{WITH_NCCL} on cuda:{r}" for r in range(3)
    ]


def test_a_named_backend_is_kept_gloo_on_the_cpu_and_nccl_refused_where_gpus_are_shared() -> None:
    env = {"TORCHJOB_MACHINE_PROCESSES": "3"}
    assert plan_device(_info(1, 3), 1, env, backend="gloo").describe() == "gloo on cpu"
    assert plan_device(_info(0, 1), 1, {}, backend="nccl").describe() == f"{WITH_NCCL} on cuda:0"  # CPU tensors too
    assert plan_device(_info(0, 1), 1, {}, backend="cuda:nccl").describe() == "cuda:nccl on cuda:0"
    with pytest.raises(GpuShareError, match=r"backend 'nccl': 3 processes share this machine's 1 GPU\(s\)"):
        plan_device(_info(1, 3), 1, env, backend="nccl")
