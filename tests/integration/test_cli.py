"""The CLI as a user meets it: invalid files, dry runs, list/get/logs/delete, name clashes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.support.cli import run_cli
from tests.support.local_runs import job_object, write_job
from tests.support.paths import DATA


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
    assert listing[0].split() == ["NAME", "STATE", "PROGRESS", "AGE", "RESTARTS", "REPAIRS", "SPARES"]
    assert listing[1].split()[:2] == ["verbs", "Succeeded"] and listing[1].split()[-2:] == ["0", "-"]

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


def test_validate_answers_for_a_cluster_and_local_asks_for_a_local_run(torchjob_home: Path) -> None:
    """The seeds' and Kubeflow's own YAML have no command: valid for a cluster, not runnable here."""
    path = DATA / "invalid" / "no-command-locally.yaml"
    cluster = run_cli("validate", str(path), home=torchjob_home)
    assert cluster.returncode == 0 and "valid PyTorchJob" in cluster.stdout
    assert "note: a local run needs: spec.pytorchReplicaSpecs.Worker.template.spec.containers[pytorch].command" in (
        cluster.stderr
    )
    local = run_cli("validate", "--local", str(path), home=torchjob_home)
    assert local.returncode == 2 and "command: required to run locally" in local.stderr


def test_standard_input_for_validate_render_and_run(tmp_path: Path, torchjob_home: Path) -> None:
    text = write_job(tmp_path, "piped", workers=1).read_text()
    for verb in (["validate", "-"], ["render", "-", "--to", "indexed-job"], ["run", "-"]):
        result = run_cli(*verb, home=torchjob_home, input=text, cwd=tmp_path)
        assert result.returncode == 0, (verb, result.stderr)
    assert "valid PyTorchJob 'piped'" in run_cli("validate", "-", home=torchjob_home, input=text).stdout
    assert job_object(torchjob_home, "piped")["status"]["conditions"][-1]["type"] == "Succeeded"
    bad = run_cli("validate", "-", home=torchjob_home, input="kind: [")
    assert bad.returncode == 2 and bad.stderr.startswith("torchjob: standard input: not valid YAML")


def test_an_exported_job_runs_again_from_scratch(tmp_path: Path, torchjob_home: Path) -> None:
    """`get -o yaml` holds a status; run again, it is ignored (as `kubectl apply` does), and the job runs."""
    path = write_job(tmp_path, "again", workers=1)
    assert run_cli("run", str(path), home=torchjob_home).returncode == 0
    exported = tmp_path / "exported.yaml"
    exported.write_text(run_cli("get", "again", "-o", "yaml", home=torchjob_home).stdout)
    assert run_cli("delete", "again", home=torchjob_home).returncode == 0
    rerun = run_cli("run", str(exported), home=torchjob_home)
    assert rerun.returncode == 0
    assert "note: status: ignored" in rerun.stderr
    assert "worker-0: done" in run_cli("logs", "again", home=torchjob_home).stdout


def test_templates_fill_for_validate_and_run_and_a_null_env_value_is_empty(tmp_path: Path, torchjob_home: Path) -> None:
    text = write_job(tmp_path, "tpl", workers=1).read_text().replace("name: tpl", "name: '{{ name }}'")
    data = yaml.safe_load(text)
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["env"] = [{"name": "EMPTY", "value": None}]
    (tmp_path / "tpl.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "values.json").write_text(json.dumps({"name": "filled"}))
    unfilled = run_cli("validate", str(tmp_path / "tpl.yaml"), home=torchjob_home)
    assert unfilled.returncode == 2 and "still a template" in unfilled.stderr
    values = ["--values", str(tmp_path / "values.json")]
    assert run_cli("validate", str(tmp_path / "tpl.yaml"), *values, home=torchjob_home).returncode == 0
    assert run_cli("run", str(tmp_path / "tpl.yaml"), *values, home=torchjob_home).returncode == 0
    dry = run_cli("run", "--dry-run", "--replace", str(tmp_path / "tpl.yaml"), *values, home=torchjob_home)
    assert "  EMPTY=\n" in dry.stdout and "None" not in dry.stdout
