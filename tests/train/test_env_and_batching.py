"""Launcher detection and batch arithmetic: pure functions, tables of cases."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from torchjob.train import (
    BackendUnavailable,
    BatchPlan,
    DistContext,
    LaunchEnvError,
    ResumableSampler,
    available_backends,
    detect_launch,
    init,
)

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "x",
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "node-0",
    "MASTER_PORT": "29500",
}
KUBEFLOW = {"RANK": "2", "WORLD_SIZE": "3", "MASTER_ADDR": "mnist-master-0", "MASTER_PORT": "23456"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (TORCHRUN, ("torchrun", 3, 4, 1, 2, "node-0", 29500)),
        (KUBEFLOW, ("kubeflow", 2, 3, 0, 1, "mnist-master-0", 23456)),
        ({**KUBEFLOW, "TORCHJOB_REPLICA": "worker-1"}, ("torchjob", 2, 3, 0, 1, "mnist-master-0", 23456)),
        (
            {"JOB_COMPLETION_INDEX": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "job-0.svc", "MASTER_PORT": "29400"},
            ("indexed-job", 1, 2, 0, 1, "job-0.svc", 29400),
        ),
        ({}, ("single", 0, 1, 0, 1, "127.0.0.1", 0)),
    ],
    ids=["torchrun", "kubeflow", "torchjob", "indexed-job", "nothing"],
)
def test_detect_launch(env: dict[str, str], expected: tuple[object, ...]) -> None:
    info = detect_launch(env)
    got = (
        info.launcher,
        info.rank,
        info.world_size,
        info.local_rank,
        info.local_world_size,
        info.master_addr,
        info.master_port,
    )
    assert got == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({**KUBEFLOW, "RANK": "3"}, "RANK (3) must be less than WORLD_SIZE (3)"),
        ({"RANK": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR is not set, but WORLD_SIZE is 2"),
        ({**KUBEFLOW, "WORLD_SIZE": "three"}, "WORLD_SIZE must be an integer, got 'three'"),
        ({**KUBEFLOW, "MASTER_PORT": "70000"}, "MASTER_PORT must be a TCP port"),
        ({"JOB_COMPLETION_INDEX": "0"}, "WORLD_SIZE is not set: an Indexed Job must set it"),
        ({**TORCHRUN, "LOCAL_RANK": "2"}, "LOCAL_RANK (2) must be less than LOCAL_WORLD_SIZE (2)"),
    ],
)
def test_misconfigured_env_is_a_clear_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(LaunchEnvError, match=message.replace("(", r"\(").replace(")", r"\)")):
        detect_launch(env)


@pytest.mark.parametrize(
    ("mode", "batch", "world", "scale", "expected"),
    [
        ("strong", 96, 3, False, (32, 96, 0.1)),
        ("strong", 96, 3, True, (32, 96, 0.1)),  # the effective batch did not change, neither does the lr
        ("weak", 32, 3, False, (32, 96, 0.1)),
        ("weak", 32, 3, True, (32, 96, 0.30000000000000004)),  # linear rule: × 3
        ("weak", 32, 1, True, (32, 32, 0.1)),
    ],
)
def test_batch_plans(mode: str, batch: int, world: int, scale: bool, expected: tuple[int, int, float]) -> None:
    plan = BatchPlan.create(mode, batch, world, base_lr=0.1, scale_lr=scale)  # type: ignore[arg-type]
    assert (plan.per_rank_batch, plan.effective_batch, plan.learning_rate) == pytest.approx(expected)
    assert f"per-rank batch {expected[0]}, effective batch {expected[1]} ({mode} scaling)" in plan.describe()


def test_strong_scaling_needs_a_divisible_global_batch() -> None:
    with pytest.raises(ValueError, match="global batch 100 is not divisible by the world size 3"):
        BatchPlan.create("strong", 100, 3, base_lr=0.1)


def ctx(rank: int, world: int) -> DistContext:
    return DistContext(rank, 0, world, torch.device("cpu"), "gloo", "test")


def test_shards_cover_the_data_and_reshuffle_each_epoch() -> None:
    data = TensorDataset(torch.arange(30))
    samplers = [ResumableSampler(data, ctx(r, 3), seed=7) for r in range(3)]
    for s in samplers:
        s.set_epoch(0)
    epoch0 = [list(s) for s in samplers]
    assert sorted(i for shard in epoch0 for i in shard) == list(range(30))
    for s in samplers:
        s.set_epoch(1)
    assert [list(s) for s in samplers] != epoch0


def test_a_sampler_resumes_mid_epoch_exactly() -> None:
    data = TensorDataset(torch.arange(40))
    full = ResumableSampler(data, ctx(1, 2), seed=3)
    full.set_epoch(2)
    expected = list(full)

    first = ResumableSampler(data, ctx(1, 2), seed=3)
    first.set_epoch(2)
    taken = [i for _, i in zip(range(7), first, strict=False)]
    state = first.state_dict()
    assert state == {"epoch": 2, "taken": 7}

    resumed = ResumableSampler(data, ctx(1, 2), seed=3)
    resumed.load_state_dict(state)
    assert len(resumed) == len(expected) - 7
    assert taken + list(resumed) == expected
    resumed.set_epoch(3)  # the next epoch is whole again
    assert len(list(resumed)) == len(expected)


@pytest.mark.parametrize("backend", ["mpi", "cpu:gloo,cuda:mpi", "no-such-backend"])
def test_a_backend_this_torch_lacks_is_one_clear_error(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 001 asks for MPI; PyPI's torch has none. Say so, and name what there is, before any group forms."""
    for key in (*TORCHRUN, "TORCHJOB_REPLICA"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(BackendUnavailable) as caught:
        init(backend=backend)
    message = str(caught.value)
    assert f"torch.distributed backend {backend!r} is not available" in message
    assert "gloo" in available_backends() and "it has gloo" in message
    assert not torch.distributed.is_initialized()
