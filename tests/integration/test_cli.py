"""The CLI as a user meets it: invalid files, dry runs, list/get/logs/delete, name clashes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DATA, run_cli
from tests.integration.helpers import write_job

def test_missing_file(torchjob_home: Path) -> None:
    result = run_cli("run", "/no/such/job.yaml", home=torchjob_home)
    assert result.returncode == 2
    assert result.stderr.strip() == "torchjob: /no/such/job.yaml: no such file"


def test_valid_corpus_validates(torchjob_home: Path) -> None:
    result = run_cli("validate", str(DATA / "valid" / "kubeflow-mnist.yaml"), home=torchjob_home)
    assert result.returncode == 0
    assert "valid PyTorchJob 'pytorch-simple' (1 Master, 1 Worker)" in result.stdout


def test_dry_run_prints_commands_and_env_and_runs_nothing(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(tmp_path, "dry", workers=1)
    result = run_cli("run", "--dry-run", str(path), home=torchjob_home)
    assert result.returncode == 0
    assert "# master-0" in result.stdout and "# worker-0" in result.stdout
    assert "  RANK=1" in result.stdout and "  WORLD_SIZE=2" in result.stdout
    assert "worker.py" in result.stdout
    assert not (torchjob_home / "jobs").exists()


def test_ignored_fields_are_reported_once(torchjob_home: Path, tmp_path: Path) -> None:
    result = run_cli("run", "--dry-run", str(DATA / "valid" / "vendor-gpu.yaml"), home=torchjob_home)
    assert result.returncode == 0
    notes = [line for line in result.stderr.splitlines() if "ignored when running locally" in line]
    assert len(notes) == 1
    for field in ("image", "resources", "volumes", "container 'log-shipper'", "env valueFrom"):
        assert field in notes[0]


def test_list_get_logs_delete_and_name_clash(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(tmp_path, "verbs", workers=1)
    assert run_cli("run", str(path), home=torchjob_home).returncode == 0

    listing = run_cli("list", home=torchjob_home).stdout.splitlines()
    assert listing[0].split() == ["NAME", "STATE", "AGE", "RESTARTS"]
    assert listing[1].split()[:2] == ["verbs", "Succeeded"]

    wire = json.loads(run_cli("get", "verbs", "-o", "json", home=torchjob_home).stdout)
    assert wire["apiVersion"] == "kubeflow.org/v1" and wire["kind"] == "PyTorchJob"
    assert wire["status"]["conditions"][-1]["type"] == "Succeeded"
    assert wire["status"]["replicaStatuses"]["Worker"]["succeeded"] == 1
    assert "training.kubeflow.org/job-name=verbs" in wire["status"]["replicaStatuses"]["Worker"]["selector"]
    assert wire["status"]["startTime"] and wire["status"]["completionTime"]

    logs = run_cli("logs", "verbs", home=torchjob_home).stdout
    assert "[master-0] master-0 attempt 0 started" in logs and "[worker-0] worker-0: done" in logs
    one = run_cli("logs", "verbs", "--replica", "worker-0", home=torchjob_home).stdout
    assert one.splitlines()[0].startswith("worker-0 attempt 0 started")
    bad = run_cli("logs", "verbs", "--replica", "worker-7", home=torchjob_home)
    assert bad.returncode == 3 and "has no replica 'worker-7'" in bad.stderr

    again = run_cli("run", str(path), home=torchjob_home)
    assert again.returncode == 3 and "already exists (Succeeded)" in again.stderr
    assert run_cli("run", "--replace", str(path), home=torchjob_home).returncode == 0

    assert run_cli("delete", "verbs", home=torchjob_home).returncode == 0
    assert run_cli("list", home=torchjob_home).stdout.splitlines()[1:] == []


def test_ttl_zero_removes_the_job_when_it_ends(tmp_path: Path, torchjob_home: Path) -> None:
    path = write_job(tmp_path, "ephemeral", workers=1, ttlSecondsAfterFinished=0)
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0
    assert "removed (ttlSecondsAfterFinished)" in result.stderr
    assert not (torchjob_home / "jobs" / "ephemeral").exists()
