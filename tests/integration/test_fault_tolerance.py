"""Fault tolerance end to end: hang detection, root causes from error files, preemption that is not a failure."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
import pytest
import yaml

from tests.support.cli import run_cli
from tests.support.local_runs import condition, job_file, job_object, start_run
from tests.support.paths import INTEGRATION_SCRIPTS, ROOT
from tests.support.waits import wait_until
from torchjob.testing import make_job


def test_a_hung_rank_is_detected_named_and_the_group_recovers(tmp_path: Path, torchjob_home: Path) -> None:
    job = (
        make_job("hang")
        .master()
        .workers(1)
        .command("python", str(INTEGRATION_SCRIPTS / "hang_train.py"), "--hang-rank", "1", "--hang-step", "5")
        .annotate(**{"torchjob.io/progress-deadline-seconds": "40", "torchjob.io/termination-grace-seconds": "2"})
    )
    result = run_cli("run", str(job_file(tmp_path, job)), home=torchjob_home)
    assert result.returncode == 0, result.stderr[-2000:]
    status = job_object(torchjob_home, "hang")["status"]
    assert status["restartCount"] == 1
    outcome = status["attempts"][0]["outcome"]
    assert outcome.startswith("Hung: no progress for 40s")
    assert (
        "worker-0 stopped at step 4 (silent for " in outcome and "the others at step 5" in outcome
    )  # rank 1 never finished step 5
    assert "Hung" in result.stderr
    assert "[worker-0#1] rank 1: done" in result.stdout


@pytest.mark.heavy(
    twin="tests/integration/test_fault_tolerance.py::test_a_hung_rank_is_detected_named_and_the_group_recovers"
)
def test_a_hung_process_of_a_replica_with_two_processes_is_named(tmp_path: Path, torchjob_home: Path) -> None:
    """nprocPerNode 2: replica worker-0 runs global ranks 2 and 3 under torchrun. Rank 3 hangs; the heartbeat
    files are keyed by replica and local rank, so the controller sees worker-0 stall and names it. (Start-up is not
    judged by the progress deadline, policies/progress.py: the four processes' slow imports count against nothing.)"""
    job = (
        make_job("hang2")
        .master()
        .workers(1)
        .command(
            "torchrun",
            "--nproc-per-node=2",
            str(INTEGRATION_SCRIPTS / "hang_train.py"),
            "--hang-rank",
            "3",
            "--hang-step",
            "5",
        )
        .annotate(**{"torchjob.io/progress-deadline-seconds": "30", "torchjob.io/termination-grace-seconds": "2"})
    )
    data = job.wire()
    data["spec"]["nprocPerNode"] = "2"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0, result.stderr[-2000:]
    status = job_object(torchjob_home, "hang2")["status"]
    assert status["restartCount"] == 1
    outcome = status["attempts"][0]["outcome"]
    assert outcome.startswith("Hung: no progress for 30s")
    assert "worker-0 stopped at step 4 (silent for " in outcome and "the others at step 5" in outcome


def test_the_exception_reaches_the_status_through_the_error_file(tmp_path: Path, torchjob_home: Path) -> None:
    job = (
        make_job("hidden")
        .workers(1)
        .restart_policy("Never")
        .command("python", str(INTEGRATION_SCRIPTS / "hang_train.py"), "--hide-and-raise")
    )
    result = run_cli("run", str(job_file(tmp_path, job)), home=torchjob_home)
    assert result.returncode == 1
    log = (torchjob_home / "jobs" / "hidden" / "logs" / "0" / "worker-0.log").read_text()
    assert "hidden from the logs" not in log
    failed = condition(job_object(torchjob_home, "hidden"), "Failed")
    assert failed is not None and "worker-0 exited with code 1: ValueError: hidden from the logs" in failed["message"]


def trainer_of(home: Path, job: str, replica: str, attempt: int = 0) -> psutil.Process:
    state = yaml.safe_load((home / "jobs" / job / "local.json").read_text())
    shim = next(p["pid"] for p in state["processes"] if p["replica"] == replica and p["attempt"] == attempt)
    return psutil.Process(shim).children()[0]


def test_preemption_checkpoints_restarts_and_is_not_counted(tmp_path: Path, torchjob_home: Path) -> None:
    job = yaml.safe_load((ROOT / "examples" / "mnist" / "job.yaml").read_text())
    job["metadata"]["name"] = "preempted"
    job["spec"]["runPolicy"] = {"backoffLimit": 0}  # a counted restart would fail the job
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        container = spec["template"]["spec"]["containers"][0]
        container["args"] = ["--epochs", "2", "--log-interval", "5", "--checkpoint-every", "10"]
        container["workingDir"] = str(ROOT / "examples" / "mnist")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    run = start_run(path, torchjob_home)
    log = torchjob_home / "jobs" / "preempted" / "logs" / "0" / "worker-0.log"
    wait_until(lambda: log.exists() and "batch: 15/" in log.read_text(), what="worker-0 at batch 15")
    trainer_of(torchjob_home, "preempted", "worker-0").send_signal(signal.SIGTERM)  # an eviction
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-2000:]
    status = job_object(torchjob_home, "preempted")["status"]
    assert (status["restartCount"], status["attempt"]) == (0, 1)
    # Every rank leaves together; the one that was told is named.
    assert "was preempted" in status["attempts"][0]["outcome"]
    assert "preempted (SIGTERM to rank 1); checkpoint of step" in stdout  # saved before leaving
    assert "[master-0#1] Rank 0: resumed from the checkpoint of step" in stdout
