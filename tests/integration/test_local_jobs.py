"""Real jobs on the local backend: restart policies, backoff, deadline, and the env contract, end to end."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.local_runs import alive, all_pids, condition, job_object, replica_records, write_job
from torchjob.core.times import parse_timestamp


def test_on_failure_restarts_the_ddp_group_once_and_succeeds(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(tmp_path, "flaky", "--ddp", "--act", "worker-1:0:exit:1")
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0, result.stderr
    job = job_object(torchjob_home, "flaky")
    assert condition(job, "Succeeded")["status"] == "True"  # type: ignore[index]
    assert job["status"]["restartCount"] == 1
    assert [a["attempt"] for a in job["status"]["attempts"]] == [0, 1]
    assert "worker-1 exited with code 1" in job["status"]["attempts"][0]["outcome"]
    # Every rank of the second attempt joined a real gloo group of 3 and all-reduced.
    assert "all_reduce gave 3 across world size 3" in result.stdout
    records = replica_records(torchjob_home, "flaky")
    assert set(records) >= {"master-0-1", "worker-0-1", "worker-1-1"}
    # Each attempt meets on a fresh port, so a restart never finds the old one in use.
    assert records["master-0-0"]["MASTER_PORT"] != records["master-0-1"]["MASTER_PORT"]
    assert not any(alive(pid) for pid in all_pids(torchjob_home, "flaky"))


def test_env_contract_locally(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(tmp_path, "envs", workers=2)
    assert run_cli("run", str(path), home=torchjob_home).returncode == 0
    records = replica_records(torchjob_home, "envs")
    ranks = {name: (r["RANK"], r["WORLD_SIZE"], r["MASTER_ADDR"]) for name, r in records.items()}
    assert ranks == {
        "master-0-0": ("0", "3", "127.0.0.1"),
        "worker-0-0": ("1", "3", "127.0.0.1"),
        "worker-1-0": ("2", "3", "127.0.0.1"),
    }
    assert {r["MASTER_PORT"] for r in records.values()} == {records["master-0-0"]["MASTER_PORT"]}
    assert records["worker-1-0"]["PET_NODE_RANK"] == "2" and records["worker-1-0"]["PYTHONUNBUFFERED"] == "1"


def test_exit_code_policy_fails_on_a_program_error_and_says_why(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(
        tmp_path,
        "broken",
        "--act",
        "worker-1:*:raise:the data is bad",
        "--sleep",
        "30",
        restart_policy="ExitCode",
    )
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 1
    job = job_object(torchjob_home, "broken")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "PyTorchJobFailed"
    assert "worker-1 exited with code 1: ValueError: the data is bad" in failed["message"]
    assert job["status"]["restartCount"] == 0
    # The other replicas were sleeping; a failed job's replicas are stopped, not left running.
    assert not any(alive(pid) for pid in all_pids(torchjob_home, "broken"))
    assert (
        "worker-1 exited with code 1: ValueError: the data is bad"
        in run_cli("get", "broken", home=torchjob_home).stdout
    )


def test_exit_code_policy_retries_a_sigkill(tmp_path: Path, torchjob_home: Path) -> None:
    # The master outlives the kill, or it would succeed (and with it the job) first.
    path = write_job(tmp_path, "killed", "--act", "worker-0:0:signal:9", "--sleep", "3", restart_policy="ExitCode")
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0, result.stderr
    job = job_object(torchjob_home, "killed")
    assert job["status"]["restartCount"] == 1
    assert "worker-0 was killed by SIGKILL" in job["status"]["attempts"][0]["outcome"]
    assert "Restarting" in result.stderr


def test_backoff_limit_fails_the_job(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(
        tmp_path,
        "crashloop",
        "--act",
        "master-0:*:signal:9",
        workers=1,
        restart_policy="ExitCode",
        backoffLimit=2,
    )
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 1
    job = job_object(torchjob_home, "crashloop")
    message = condition(job, "Failed")["message"]  # type: ignore[index]
    assert "reached the specified backoff limit (2 restarts)" in message
    assert "master-0 was killed by SIGKILL" in message
    assert job["status"]["restartCount"] == 2 and job["status"]["attempt"] == 2
    # A crash loop backs off as the kubelet does: the first restart at once, the second after 10 s.
    assert job["status"]["crashLoopRestarts"] == 2
    restarts = [line for line in result.stderr.splitlines() if "is restarting" in line]
    assert len(restarts) == 2 and "back-off" not in restarts[0], restarts
    assert "back-off: the next attempt starts in 10s (2 restarts in a row)" in restarts[1]
    attempts = job["status"]["attempts"]
    assert parse_timestamp(attempts[2]["startTime"]) - parse_timestamp(attempts[1]["endTime"]) >= timedelta(seconds=10)


def test_active_deadline_fails_a_job_that_runs_too_long(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(tmp_path, "slow", "--sleep", "120", "--spawn-child", workers=1, activeDeadlineSeconds=3)
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 1
    job = job_object(torchjob_home, "slow")
    assert "active longer than the specified deadline (3s)" in condition(job, "Failed")["message"]  # type: ignore[index]
    assert not any(alive(pid) for pid in all_pids(torchjob_home, "slow"))


def test_never_policy_and_a_missing_program(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(tmp_path, "missing", workers=1, restart_policy="Never")
    path.write_text(path.read_text().replace("- python\n", "- no-such-program-xyz\n"))
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 1
    message = condition(job_object(torchjob_home, "missing"), "Failed")["message"]  # type: ignore[index]
    assert "exited with code 127" in message and "no-such-program-xyz" in message
