"""Groups of 8 ranks on this 2-core machine: the MNIST examples widened (1 Master + 7 Workers, or 8 elastic Workers,
the same global batch), ranks lost in epoch 2, each job Succeeded with the accuracy the 3-rank job reaches.

The wider groups (16, 32) are ``bench.width``'s; here the cases CI can afford. Locally the rendezvous store is a
process of its own (``torchjob.train.store_server``), not a rank, so no rank's loss takes the store with it.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.support.local_runs import job_object, shim_pid, start_run
from tests.support.paths import ROOT

MNIST = ROOT / "examples" / "mnist"
ACCURACY_BAR = 0.90  # the README's bar, which the 3-rank job reaches (about 0.95)
RANKS = 8


def widened(tmp_path: Path, file: str, args: list[str], spares: int | None = None) -> tuple[Path, str]:
    """The example job ``file`` with ``RANKS`` ranks and ``args``, its scripts found in the example's folder."""
    job: dict[str, Any] = yaml.safe_load((MNIST / file).read_text())
    specs = job["spec"]["pytorchReplicaSpecs"]
    if "Master" in specs:
        specs["Worker"]["replicas"] = RANKS - 1
    else:
        specs["Worker"]["replicas"] = RANKS
        job["spec"]["elasticPolicy"] = {"minReplicas": RANKS - 2, "maxReplicas": RANKS}
    if spares is not None:
        job["metadata"]["annotations"]["torchjob.io/spares"] = str(spares)
    for spec in specs.values():
        container = spec["template"]["spec"]["containers"][0]
        container["args"] = args
        container["workingDir"] = str(MNIST)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path, str(job["metadata"]["name"])


def run_and_signal(
    tmp_path: Path, path: Path, name: str, lost: dict[str, signal.Signals], spares: int = 0
) -> tuple[dict[str, Any], str]:
    """Run the job; once every replica in ``lost`` trains in epoch 2 and ``spares`` warm spares are ready, send
    each lost replica's trainer its signal at once. Returns the job's status once it ended (asserting it
    Succeeded) and what ``torchjob run`` printed of it."""
    home = tmp_path / "home"
    run = start_run(path, home)
    logs = home / "jobs" / name / "logs" / "0"
    deadline = time.monotonic() + 600
    # A spare still warming when the ranks reach epoch 2 (not seen here, but nothing rules it out on a loaded
    # machine) makes a loss a group restart, as it should: the in-place case would not be what is tested.
    while not all("epoch: 2/" in _text(logs / f"{replica}.log") for replica in lost) or _ready(home, name) < spares:
        assert run.poll() is None, run.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{sorted(lost)} never trained in epoch 2 beside {spares} ready spares"
        time.sleep(0.05)
    trainers = {replica: psutil.Process(shim_pid(home, name, replica)).children()[0] for replica in lost}
    for replica, sent in lost.items():
        trainers[replica].send_signal(sent)
    _, stderr = run.communicate(timeout=900)
    assert run.returncode == 0, stderr[-3000:]
    status: dict[str, Any] = job_object(home, name)["status"]
    metrics = json.loads((home / "jobs" / name / "output" / "metrics.json").read_text())
    assert metrics["accuracy"] >= ACCURACY_BAR, metrics
    return status, stderr


def _ready(home: Path, name: str) -> int:
    try:
        return int(job_object(home, name)["status"].get("sparesReady") or 0)
    except (OSError, ValueError, KeyError):
        return 0


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
@pytest.mark.parametrize(
    "lost",
    [
        {"worker-3": signal.SIGKILL},
        {"worker-2": signal.SIGKILL, "worker-5": signal.SIGKILL},
        {"worker-4": signal.SIGSTOP},
    ],
    ids=["one-killed", "two-killed-at-once", "one-frozen"],
)
def test_eight_ranks_in_place(tmp_path: Path, lost: dict[str, signal.Signals]) -> None:
    """examples/mnist/job-inplace.yaml at 8 ranks, one warm spare per lost rank: repaired in place, no restart."""
    path, name = widened(tmp_path, "job-inplace.yaml", ["--epochs", "3"], spares=len(lost))
    status, events = run_and_signal(tmp_path, path, name, lost, spares=len(lost))
    assert (status["attempt"], status["restartCount"]) == (0, 0), events[-3000:]
    assert status["repairs"] >= 1


@pytest.mark.slow
def test_eight_ranks_elastic_in_place(tmp_path: Path) -> None:
    """examples/mnist/job-elastic-inplace.yaml at 8 Workers (at least 6): a Worker SIGKILLed, the others carry on
    and the group grows back, no restart."""
    path, name = widened(tmp_path, "job-elastic-inplace.yaml", ["--epochs", "4"])
    status, events = run_and_signal(tmp_path, path, name, {"worker-3": signal.SIGKILL})
    assert (status["attempt"], status["restartCount"]) == (0, 0), events[-3000:]


@pytest.mark.slow
def test_eight_ranks_warm_group_restart(tmp_path: Path) -> None:
    """The README's job (examples/mnist/job.yaml, warm restarts) at 8 ranks, the same global batch: a Worker
    SIGKILLed, the group restarted from its checkpoint."""
    args = ["--epochs", "3", "--batch-size", "96", "--scaling", "strong"]
    path, name = widened(tmp_path, "job.yaml", args)
    status, events = run_and_signal(tmp_path, path, name, {"worker-3": signal.SIGKILL})
    assert status["attempt"] == 1 and status["restartCount"] == 1, events[-3000:]
