"""The worker library and the examples on a GPU: run where CUDA is (the device machine a session may be lent);
skipped everywhere else, CI included, which has none.

One GPU: a single rank takes NCCL on it; several ranks of one machine share it over gloo with their tensors on
the GPU (NCCL refuses two ranks on one device: torchjob.train.devices)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.ranks import run_sharded, spawn_ranks

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
SHARED = {"TORCHJOB_MACHINE_PROCESSES": "2"}  # as the local backend says it of a group on one machine


def _ok(results: list[subprocess.CompletedProcess[str]]) -> str:
    assert [r.returncode for r in results] == [0] * len(results), "\n".join(r.stdout[-3000:] for r in results)
    return "\n".join(r.stdout for r in results)


def test_one_rank_takes_nccl_on_the_gpu_and_resumes_a_checkpoint_onto_it(tmp_path: Path) -> None:
    said = _ok(spawn_ranks("ddp_on_device.py", 1, "--ckpt", str(tmp_path / "c")))
    assert "RANK 0 TRAINS WITH cpu:gloo,cuda:nccl ON cuda:0" in said
    assert "RANK 0 RESUMED ON cuda:0" in said


def test_two_ranks_share_the_gpu_over_gloo_with_cuda_tensors(tmp_path: Path) -> None:
    said = _ok(spawn_ranks("ddp_on_device.py", 2, "--ckpt", str(tmp_path / "c"), env=SHARED))
    assert said.count("TRAINS WITH gloo ON cuda:0") == 2 and said.count("RESUMED ON cuda:0") == 2


def _sharded(world: int, *args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """Rank 0's final checksum, and every rank's output (the tests count what each says)."""
    checksum, _, results = run_sharded(world, *args, env=env)
    return checksum, "\n".join(r.stdout for r in results)


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_fsdp2_and_a_dcp_checkpoint_on_the_gpu_at_world_size_1(tmp_path: Path, async_save: bool) -> None:
    ckpt = str(tmp_path / "ckpt")
    extra = ["--async-save"] if async_save else []
    went_on, said = _sharded(1, "--ckpt", ckpt, "--steps", "5", "--after", "2", *extra)
    assert "TRAINS WITH cpu:gloo,cuda:nccl ON cuda:0" in said
    resumed, said = _sharded(1, "--ckpt", ckpt, "--load", "--after", "2")
    assert "LOADED step 5 saved by 1 ranks" in said
    assert resumed == went_on


def test_fsdp2_over_ranks_sharing_the_gpu_is_refused_and_their_cpu_checkpoint_loads_onto_it(tmp_path: Path) -> None:
    refused = spawn_ranks("sharded.py", 2, "--ckpt", str(tmp_path / "refused"), env=SHARED)
    assert [r.returncode for r in refused] == [4, 4], refused[0].stdout[-3000:]  # not a crash in the first backward
    assert "a sharded model on cuda:0 needs NCCL, and this group has 'gloo'" in refused[0].stdout
    ckpt = str(tmp_path / "ckpt")
    went_on, said = _sharded(2, "--ckpt", ckpt, "--steps", "5", "--after", "2", env={"CUDA_VISIBLE_DEVICES": ""})
    assert said.count("TRAINS WITH gloo ON cpu") == 2
    resumed, said = _sharded(1, "--ckpt", ckpt, "--load", "--after", "2")  # 2 CPU ranks' shards into 1 GPU rank
    assert "TRAINS WITH cpu:gloo,cuda:nccl ON cuda:0" in said and "LOADED step 5 saved by 2 ranks" in said
    assert [float(v) for v in resumed.split()] == pytest.approx([float(v) for v in went_on.split()], rel=1e-3)


def test_the_mnist_example_trains_on_the_gpu_its_three_replicas_sharing_it(tmp_path: Path) -> None:
    done = run_cli("run", str(ROOT / "examples/mnist/job.yaml"), home=tmp_path / "home", timeout=600)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    accuracy = re.search(r"test accuracy=(\S+)", said)
    assert accuracy is not None and float(accuracy[1]) > 0.9, said[-4000:]
    assert "gloo on cuda:0" in said, said[-4000:]


def _gpt(out: Path, steps: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "train.py", "--size", "100m", "--steps", str(steps), "--checkpoint-every", "10"],
        cwd=ROOT / "examples/gpt",
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TORCHJOB_OUTPUT_DIR": str(out)},
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "training completed" in said, said[-4000:]
    summary: dict[str, float] = json.loads((out / "metrics.json").read_text())
    return summary


def test_the_gpt_example_trains_on_the_gpu_and_resumes_from_its_dcp_checkpoint(tmp_path: Path) -> None:
    first = _gpt(tmp_path, 20)  # asynchronous DCP saves at steps 10 and 20, staged in pinned memory
    assert first["world_size"] == 1 and first["last_loss"] < first["first_loss"]
    again = _gpt(tmp_path, 30)
    assert again["resumed_from"] == 20
