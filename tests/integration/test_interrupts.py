"""Ctrl-C, SIGTERM, and a killed controller: no process of the job is left, and the status says what happened."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.local_runs import alive, all_pids, condition, job_object, replica_records, start_run, write_job
from tests.support.waits import wait_until


def wait_until_all_started(home: Path, name: str, replicas: int) -> None:
    def started() -> bool:
        records = replica_records(home, name)
        return len(records) == replicas and all("child_pid" in r for r in records.values())

    wait_until(started, what=f"{replicas} replicas of {name} to start")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_to_run_stops_every_process_and_records_it(
    tmp_path: Path, torchjob_home: Path, signum: int, code: int
) -> None:
    path = write_job(tmp_path, "stopme", "--sleep", "300", "--spawn-child")
    run = start_run(path, torchjob_home)
    wait_until_all_started(torchjob_home, "stopme", 3)
    run.send_signal(signum)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == code
    assert "interrupted" in stderr
    pids = all_pids(torchjob_home, "stopme")
    assert len(pids) == 9  # 3 shims, 3 replicas, 3 grandchildren
    assert [p for p in pids if alive(p)] == []
    failed = condition(job_object(torchjob_home, "stopme"), "Failed")
    assert failed is not None and signal.Signals(signum).name in failed["message"]


def test_a_killed_controller_takes_its_replicas_with_it(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(tmp_path, "orphan", "--sleep", "300", "--spawn-child")
    run = start_run(path, torchjob_home)
    wait_until_all_started(torchjob_home, "orphan", 3)
    run.kill()  # SIGKILL: no chance to clean up
    run.communicate(timeout=30)
    pids = all_pids(torchjob_home, "orphan")
    wait_until(lambda: not any(alive(p) for p in pids), timeout=30, what="the orphaned replicas to die")
    # The record is settled on the next read: the job failed, and says why.
    result = run_cli("get", "orphan", "-o", "json", home=torchjob_home)
    assert result.returncode == 0
    assert "controller (pid" in condition(job_object(torchjob_home, "orphan"), "Failed")["message"]  # type: ignore[index]


def test_detached_run_then_delete_from_another_shell(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(tmp_path, "bg", "--sleep", "300", "--spawn-child")
    result = run_cli("run", "--detach", str(path), home=torchjob_home)
    assert result.returncode == 0 and "started" in result.stdout
    wait_until_all_started(torchjob_home, "bg", 3)
    assert "bg" in run_cli("list", home=torchjob_home).stdout
    pids = all_pids(torchjob_home, "bg")
    deleted = run_cli("delete", "bg", home=torchjob_home)
    assert deleted.returncode == 0 and 'pytorchjob "bg" deleted' in deleted.stdout
    assert [p for p in pids if alive(p)] == []
    assert not (torchjob_home / "jobs" / "bg").exists()
    missing = run_cli("get", "bg", home=torchjob_home)
    assert missing.returncode == 3 and "not found" in missing.stderr
