"""The examples: MNIST on torchjob.train (the README's main job), the plain Kubeflow script, IDX data."""

from __future__ import annotations

import gzip
import json
import re
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.support.cli import run_cli
from tests.support.local_runs import condition, job_object
from tests.support.paths import ROOT

ACCURACY_BAR = 0.90  # the README states this bar; a typical run reaches about 0.95
EQUIVALENCE_TOLERANCE = 0.03  # world size 1 vs 3 at the same effective batch: held-out accuracy within 3 points


@dataclass
class Run:
    home: Path
    name: str
    result: subprocess.CompletedProcess[str]

    @property
    def output(self) -> Path:
        return self.home / "jobs" / self.name / "output"

    def metrics(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.output / "metrics.json").read_text())
        return data


@pytest.fixture(scope="module")
def three_replicas(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The README's main job, run once for the tests of this module."""
    home = tmp_path_factory.mktemp("mnist-home")
    result = run_cli("run", str(ROOT / "examples" / "mnist" / "job.yaml"), home=home, timeout=600)
    return Run(home, "mnist", result)


def test_the_bundled_digits_are_parsed_once_then_read_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys.path.insert(0, str(ROOT / "examples" / "mnist"))
    try:
        import mnist_data
    finally:
        sys.path.pop(0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    parsed = mnist_data.load("")
    (cached,) = (tmp_path / "cache" / "torchjob-examples").iterdir()
    assert cached.name.endswith(".npy") and not list(cached.parent.glob("*.partial"))
    table = np.load(cached)
    table[0, 0] = 255 - table[0, 0]  # proves the second load reads the cache, not the CSV
    np.save(cached, table)
    again = mnist_data.load("")
    assert all(np.array_equal(a, b) for a, b in zip(parsed[1:], again[1:], strict=True))
    assert not np.array_equal(parsed[0], again[0]) or not np.array_equal(parsed[2], again[2])
    # A cached file of another shape is not taken for the digits: they are parsed again and cached anew.
    np.save(cached, np.zeros((3, 3), dtype=np.uint8))
    assert all(np.array_equal(a, b) for a, b in zip(parsed, mnist_data.load(""), strict=True))
    assert np.load(cached).shape == (5000, 28 * 28 + 1)
    # A cache that cannot be written is no error: the digits are parsed each time.
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/no-cache-here")
    assert all(np.array_equal(a, b) for a, b in zip(parsed, mnist_data.load(""), strict=True))


@pytest.mark.slow
def test_mnist_job_trains_on_three_replicas(three_replicas: Run) -> None:
    result = three_replicas.result
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[master-0] Rank 0: world size 3, per-rank batch 32, effective batch 96 (weak scaling)" in result.stdout
    for rank, replica in enumerate(("master-0", "worker-0", "worker-1")):
        assert f"[{replica}] Rank {rank}: epoch: 8/8, batch: 42/42, mini-batch size: 22" in result.stdout
        assert re.search(rf"\[{replica}\] Rank {rank}: epoch 8/8, average epoch loss=\d+\.\d+", result.stdout)
        assert f"[{replica}] Rank {rank}: training completed." in result.stdout
    metrics = three_replicas.metrics()
    assert metrics["world_size"] == 3 and metrics["effective_batch"] == 96
    assert metrics["accuracy"] >= ACCURACY_BAR
    assert (three_replicas.output / "mnist_cnn.pt").stat().st_size > 10_000
    assert len(list((three_replicas.output / "checkpoints").glob("ckpt-*.json"))) == 3  # keep-last-3
    assert condition(job_object(three_replicas.home, "mnist"), "Succeeded")["status"] == "True"  # type: ignore[index]


@pytest.mark.slow
def test_metrics_summary_and_plot(three_replicas: Run, tmp_path: Path) -> None:
    plot = tmp_path / "metrics.png"
    result = run_cli("metrics", "mnist", "--plot", str(plot), home=three_replicas.home)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["RANK", "STEPS", "LAST", "LOSS", "SAMPLES/S", "STEP", "MS", "CHECKPOINT", "S"]
    assert [line.split()[:2] for line in lines[1:4]] == [["0", "336"], ["1", "336"], ["2", "336"]]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    beats = [json.loads(p.read_text()) for p in sorted((three_replicas.output / "heartbeat").glob("*-0.json"))]
    assert len(beats) == 3 and all(b["step"] > 300 for b in beats)


@pytest.mark.slow
def test_the_same_metrics_are_tensorboard_runs_per_attempt_and_rank(three_replicas: Run) -> None:
    """Read with TensorBoard's own reader: one run per rank of attempt 0, every logged step's loss in it."""
    result = run_cli("metrics", "mnist", "--tensorboard", home=three_replicas.home)
    assert result.returncode == 0, result.stderr
    logdir = Path(result.stdout.strip())
    assert logdir == three_replicas.output / "tensorboard"
    assert sorted(p.relative_to(logdir).as_posix() for p in logdir.glob("*/*")) == [
        "attempt-0/rank-0",
        "attempt-0/rank-1",
        "attempt-0/rank-2",
    ]
    for rank in range(3):
        events = EventAccumulator(str(logdir / "attempt-0" / f"rank-{rank}"))
        events.Reload()
        assert {"loss", "samples_per_second", "step_seconds"} <= set(events.Tags()["scalars"])
        logged = [json.loads(line) for line in (three_replicas.output / "metrics" / f"rank-{rank}.jsonl").open()]
        losses = events.Scalars("loss")
        assert [e.step for e in losses] == [r["step"] for r in logged]
        assert [e.value for e in losses] == pytest.approx([r["loss"] for r in logged], rel=1e-6)
    missing = run_cli("metrics", "nosuchjob", "--tensorboard", home=three_replicas.home)
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_world_size_1_and_3_reach_comparable_accuracy(three_replicas: Run, tmp_path: Path) -> None:
    """Strong scaling: one process with the global batch of 96 against 3 ranks of 32."""
    job = yaml.safe_load((ROOT / "examples" / "mnist" / "job.yaml").read_text())
    job["metadata"]["name"] = "mnist-single"
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["args"] = ["--epochs", "8", "--scaling", "strong", "--batch-size", "96"]
    container["workingDir"] = str(ROOT / "examples" / "mnist")
    path = tmp_path / "single.yaml"
    path.write_text(yaml.safe_dump(job))
    single = Run(three_replicas.home, "mnist-single", run_cli("run", str(path), home=three_replicas.home, timeout=600))
    assert single.result.returncode == 0, single.result.stderr[-2000:]
    assert "world size 1, per-rank batch 96, effective batch 96 (strong scaling)" in single.result.stdout
    one, three = single.metrics()["accuracy"], three_replicas.metrics()["accuracy"]
    assert abs(one - three) <= EQUIVALENCE_TOLERANCE, f"world size 1: {one:.4f}, world size 3: {three:.4f}"


@pytest.mark.slow
def test_a_plain_kubeflow_script_trains_without_torchjob_code(torchjob_home: Path) -> None:
    script = (ROOT / "examples" / "mnist" / "train_plain.py").read_text()
    assert "torchjob" not in script.split('"""', 2)[2]  # nothing of torchjob below the docstring
    result = run_cli("run", str(ROOT / "examples" / "mnist" / "job-plain.yaml"), home=torchjob_home, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[worker-1] Rank 2: training completed." in result.stdout
    metrics = json.loads((torchjob_home / "jobs" / "mnist-plain" / "output" / "metrics.json").read_text())
    assert metrics["accuracy"] >= ACCURACY_BAR


def write_idx(path: Path, array: np.ndarray, gz: bool) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(np.uint8).tobytes()
    if gz:
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzipped"])
def test_mnist_reads_standard_idx_files_from_a_folder_or_url(tmp_path: Path, gz: bool) -> None:
    sys.path.insert(0, str(ROOT / "examples" / "mnist"))
    try:
        import mnist_data
    finally:
        sys.path.pop(0)
    train_x, train_y, test_x, test_y = mnist_data.load("")
    assert train_x.shape == (4000, 28, 28) and test_x.shape == (1000, 28, 28)
    assert set(np.unique(test_y)) == set(range(10))
    write_idx(tmp_path / "train-images-idx3-ubyte", train_x[:100], gz)
    write_idx(tmp_path / "train-labels-idx1-ubyte", train_y[:100], gz)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", test_x[:50], gz)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", test_y[:50], gz)
    for source in (str(tmp_path), tmp_path.as_uri()):
        x, _y, _tx, ty = mnist_data.load(source)
        assert np.array_equal(x, train_x[:100]) and np.array_equal(ty, test_y[:50])
    with pytest.raises(ValueError, match="bad magic"):
        mnist_data.parse_idx(b"\x01\x02\x03\x04")


@pytest.mark.slow
def test_the_in_place_mnist_job_loses_a_rank_and_carries_on(tmp_path: Path) -> None:
    """examples/mnist/job-inplace.yaml: worker-1 is SIGKILLed in epoch 2; a warm spare takes its place."""
    import os
    import signal
    import time

    import psutil

    job = yaml.safe_load((ROOT / "examples" / "mnist" / "job-inplace.yaml").read_text())
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        container = spec["template"]["spec"]["containers"][0]
        container["args"] = ["--epochs", "3"]
        container["workingDir"] = str(ROOT / "examples" / "mnist")
    path, home = tmp_path / "job.yaml", tmp_path / "home"
    path.write_text(yaml.safe_dump(job))
    env = {**os.environ, "TORCHJOB_HOME": str(home)}
    argv = [sys.executable, "-m", "torchjob.cli.main", "run", str(path)]
    run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jobs = home / "jobs" / "mnist-inplace"
    log, spare = jobs / "logs" / "0" / "worker-1.log", jobs / "output" / "inplace" / "spare-0.json"
    deadline = time.monotonic() + 300
    while not (log.exists() and "epoch: 2/" in log.read_text(errors="replace") and spare.exists()):
        assert run.poll() is None and time.monotonic() < deadline, "worker-1 never reached epoch 2 beside a warm spare"
        time.sleep(0.05)
    state = json.loads((jobs / "local.json").read_text())
    shim = next(p["pid"] for p in state["processes"] if p["replica"] == "worker-1" and p.get("gone_at") is None)
    psutil.Process(shim).children()[0].send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    status = job_object(home, "mnist-inplace")["status"]
    assert (status["attempt"], status["restartCount"], status["repairs"]) == (0, 0, 1)
    assert "[spare-0] torchjob: spare spare-0 joins as worker-1 (rank 2 of 3)" in stdout
    assert status["trainerStatus"]["progressPercentage"] == 100
    metrics = json.loads((jobs / "output" / "metrics.json").read_text())
    assert metrics["repairs"] == 1 and metrics["accuracy"] >= ACCURACY_BAR
