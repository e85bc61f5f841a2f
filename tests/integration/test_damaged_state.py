"""Damaged records, an unusable state directory, and requests that cannot be done: one line, a clear exit code.

Exit codes: 3 for a request refused or impossible (no such job, replica or attempt; damaged records; a job
still running), 2 for a bad name, 1 only for a job that Failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cli import run_cli
from tests.support.local_runs import job_object, write_job
from tests.support.waits import wait_until


def _finished_job(tmp_path: Path, home: Path, name: str) -> Path:
    path = write_job(tmp_path, name, workers=1)
    assert run_cli("run", str(path), home=home).returncode == 0
    return home / "jobs" / name


@pytest.mark.parametrize(
    ("record", "damage"),
    [("job.json", ""), ("job.json", "{not json"), ("summary.json", "[1, 2]"), ("local.json", '{"nonsense": 1}')],
    ids=["job-empty", "job-garbage", "summary-not-object", "state-unexpected"],
)
def test_a_damaged_record_is_one_line_naming_the_file_and_delete_still_removes_it(
    tmp_path: Path, torchjob_home: Path, record: str, damage: str
) -> None:
    folder = _finished_job(tmp_path, torchjob_home, "hurt")
    if record == "local.json":
        # The state file is read while a job is unfinished: make the summary say so.
        summary = json.loads((folder / "summary.json").read_text())
        (folder / "summary.json").write_text(json.dumps({**summary, "finished": False}))
    (folder / record).write_text(damage)

    listed = run_cli("list", home=torchjob_home)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("hurt"))
    if record != "job.json":  # list reads only the summary (and the state of a running job)
        assert "Unreadable" in row
    got = run_cli("get", "hurt", "-o", "json", home=torchjob_home)
    if record != "local.json":
        assert got.returncode == 3 and "Traceback" not in got.stderr
        assert got.stderr.splitlines() == [got.stderr.strip()] and str(folder / record) in got.stderr
        assert "damaged" in got.stderr
    deleted = run_cli("delete", "hurt", home=torchjob_home)
    assert deleted.returncode == 0, deleted.stderr
    assert not folder.exists()


def test_a_home_that_is_a_file_or_cannot_be_created(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "home-file"
    not_a_dir.write_text("oops")
    job = write_job(tmp_path, "homeless", workers=1)
    for home, verb in ((not_a_dir, ["list"]), (not_a_dir, ["run", str(job)]), (not_a_dir / "sub", ["run", str(job)])):
        result = run_cli(*verb, home=home)
        assert result.returncode == 3, (verb, result.stderr)
        errors = [line for line in result.stderr.splitlines() if not line.startswith("torchjob: note:")]
        assert "Traceback" not in result.stderr and len(errors) == 1
        assert errors[0].startswith("torchjob: state directory")


def test_logs_of_what_does_not_exist_is_an_error(tmp_path: Path, torchjob_home: Path) -> None:
    _finished_job(tmp_path, torchjob_home, "talks")
    first = run_cli("logs", "talks", "--attempt", "0", home=torchjob_home)
    assert first.returncode == 0 and "master-0 attempt 0 started" in first.stdout
    for args, message in (
        (["logs", "nobody"], "job 'nobody' not found"),
        (["logs", "nobody", "-f"], "job 'nobody' not found"),
        (["logs", "talks", "--replica", "worker-3"], "has no replica 'worker-3'; it has master-0, worker-0"),
        (["logs", "talks", "--replica", "chief-0", "-f"], "has no replica 'chief-0'"),
        (["logs", "talks", "--attempt", "4"], "has no attempt 4; it has attempt 0"),
    ):
        result = run_cli(*args, home=torchjob_home)
        assert result.returncode == 3 and message in result.stderr, (args, result.stderr)
    negative = run_cli("logs", "talks", "--attempt", "-1", home=torchjob_home)
    assert negative.returncode == 2


@pytest.mark.parametrize("verb", ["get", "logs", "delete", "scale", "metrics"])
def test_a_name_that_could_be_a_path_never_reaches_the_file_system(
    tmp_path: Path, torchjob_home: Path, verb: str
) -> None:
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "job.json").write_text("{}")
    (torchjob_home / "jobs").mkdir(parents=True)
    for name in ("../../precious", "..", "UPPER", "a/b", ""):
        args = [verb, name, *(["--workers", "1"] if verb == "scale" else [])]
        result = run_cli(*args, home=torchjob_home)
        assert result.returncode == 2, (args, result.stderr)
        assert "not a valid job name" in result.stderr or "name is required" in result.stderr
    assert (outside / "job.json").exists()


def test_replace_refuses_a_job_that_still_runs(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(tmp_path, "busy", "--sleep", "300", workers=1)
    assert run_cli("run", "--detach", str(path), home=torchjob_home).returncode == 0
    try:
        wait_until(lambda: (torchjob_home / "jobs" / "busy" / "output" / "worker-0-0.json").exists(), what="start")
        refused = run_cli("run", "--replace", str(path), home=torchjob_home)
        assert refused.returncode == 3
        assert "still running; stop it with `torchjob delete busy`" in refused.stderr
        assert job_object(torchjob_home, "busy")["status"]["conditions"][-1]["type"] == "Running"
    finally:
        assert run_cli("delete", "busy", home=torchjob_home).returncode == 0


def test_run_into_one_file_ends_with_the_outcome_and_ttl_zero_keeps_the_output(
    tmp_path: Path, torchjob_home: Path
) -> None:
    path = write_job(tmp_path, "ordered", workers=2, ttlSecondsAfterFinished=0)
    # Succeeded only once every replica has: each one's last line is written before the job ends.
    data = yaml.safe_load(path.read_text())
    data["metadata"]["annotations"]["torchjob.io/success-policy"] = "AllReplicas"
    path.write_text(yaml.safe_dump(data))
    merged = tmp_path / "run.log"
    with open(merged, "w") as both:  # `torchjob run job.yaml > run.log 2>&1`
        done = subprocess.run(
            [sys.executable, "-m", "torchjob.cli.main", "run", str(path)],
            stdout=both,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TORCHJOB_HOME": str(torchjob_home)},
            timeout=300,
        )
    assert done.returncode == 0
    lines = merged.read_text().splitlines()
    # ttlSecondsAfterFinished: 0 removed the job, but not before its replicas' output was shown.
    assert {"[master-0] master-0: done", "[worker-0] worker-0: done", "[worker-1] worker-1: done"} <= set(lines)
    assert not (torchjob_home / "jobs" / "ordered").exists()
    last_replica_line = max(i for i, line in enumerate(lines) if line.startswith("["))
    outcome = next(i for i, line in enumerate(lines) if "finished and was removed" in line)
    assert last_replica_line < outcome == len(lines) - 1


def test_a_delete_that_leaves_something_behind_says_what(tmp_path: Path, torchjob_home: Path) -> None:
    folder = _finished_job(tmp_path, torchjob_home, "stuck")
    pinned = folder / "output" / "pinned.txt"
    pinned.write_text("kept")
    # An immutable file: even root cannot remove it (ext4's i attribute), as a busy mount would refuse.
    subprocess.run(["chattr", "+i", str(pinned)], check=True)
    try:
        result = run_cli("delete", "stuck", home=torchjob_home)
        assert result.returncode == 3
        assert result.stderr.startswith(f"torchjob: job 'stuck' was only partly deleted: cannot remove {pinned}")
        assert 'deleted"' not in result.stdout
    finally:
        subprocess.run(["chattr", "-i", str(pinned)], check=True)
    assert run_cli("delete", "stuck", home=torchjob_home).returncode == 0
    assert not folder.exists()
