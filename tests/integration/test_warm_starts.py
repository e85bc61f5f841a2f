"""Warm starts: a replica that is a Python script is forked from the job's warm interpreter (torch imported once),
and is in every way that a script can see the process ``python SCRIPT ARGS`` would have been; a restart is warm
too; a job can opt out; nothing is left behind."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import psutil
import yaml

from tests.support.cli import run_cli
from tests.support.local_runs import alive, all_pids, condition, job_object, start_run
from tests.support.paths import INTEGRATION_SCRIPTS
from tests.support.waits import wait_until
from torchjob.testing import make_job

PROBE = INTEGRATION_SCRIPTS / "warm_probe.py"


def probe_job(tmp_path: Path, name: str, *command: str, **annotations: str) -> Path:
    builder = make_job(name).master().workers(1).command(*command).restart_policy("OnFailure")
    builder.annotate(**{"torchjob.io/termination-grace-seconds": "3", **annotations})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(builder.wire()))
    return path


def probes(home: Path, name: str) -> dict[str, dict[str, Any]]:
    out = home / "jobs" / name / "output"
    return {p.stem.removeprefix("probe-"): json.loads(p.read_text()) for p in out.glob("probe-*.json")}


def test_a_warm_replica_is_the_process_a_cold_python_would_have_been(tmp_path: Path, torchjob_home: Path) -> None:
    path = probe_job(tmp_path, "warm", "python", str(PROBE), "--loader-workers", "2")
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0, result.stderr
    seen = probes(torchjob_home, "warm")
    assert set(seen) == {"master-0-0", "worker-0-0"}
    for replica, probe in seen.items():
        assert probe["torch_was_loaded"] is True, replica  # forked warm: torch was imported before the script ran
        assert probe["dynamo_was_loaded"] is True, replica  # a DDP script waits for what DDP's constructor imports
        assert probe["frozen_objects"] > 10_000, replica  # torch's own objects, out of the collector's sight
        assert probe["name"] == "__main__"
        assert probe["argv"] == [str(PROBE), "--loader-workers", "2"]
        assert probe["path0"] == str(INTEGRATION_SCRIPTS)
        assert probe["cmdline"] == ["python", str(PROBE), "--loader-workers", "2"]  # what ps and pgrep -f show
        assert probe["threads"] == 1  # OMP_NUM_THREADS=1, as for a cold replica
        assert probe["loader_total"] == sum(range(64))  # a DataLoader's worker processes work from a warm fork
    assert {seen["master-0-0"]["c_rank"], seen["worker-0-0"]["c_rank"]} == {"0", "1"}  # C code's getenv too
    assert seen["master-0-0"]["random"] != seen["worker-0-0"]["random"]  # a fork copies the seed; it is renewed


def test_a_module_run_with_dash_m_starts_warm(tmp_path: Path, torchjob_home: Path) -> None:
    data = make_job("module").master().workers(1).command("python", "-m", "warm_probe").wire()
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["workingDir"] = str(INTEGRATION_SCRIPTS)
    path = tmp_path / "module.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0, result.stderr
    for probe in probes(torchjob_home, "module").values():
        assert probe["torch_was_loaded"] is True
        assert probe["name"] == "__main__"
        assert probe["argv"] == [str(PROBE)]  # runpy puts the module's file first, as python -m does
        assert probe["path0"] == str(INTEGRATION_SCRIPTS)  # -m puts the working directory first


def test_a_warm_restart_resumes_from_the_checkpoint_and_the_root_cause_is_named(
    tmp_path: Path, torchjob_home: Path
) -> None:
    path = probe_job(tmp_path, "resume", "python", str(PROBE), "--fail-attempt", "0")
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0, result.stderr
    seen = probes(torchjob_home, "resume")
    assert set(seen) == {"master-0-0", "master-0-1", "worker-0-1"}  # rank 1 failed in attempt 0
    assert seen["worker-0-1"]["torch_was_loaded"] is True  # the restart forked warm as well
    assert seen["worker-0-1"]["resumed_from"] == 3
    job = job_object(torchjob_home, "resume")
    assert job["status"]["attempt"] == 1
    log = (torchjob_home / "jobs" / "resume" / "logs" / "0" / "worker-0.log").read_text()
    assert "RuntimeError: boom in attempt 0 after step 3" in log
    assert "warm_start.py" not in log and "runpy" not in log  # the traceback starts in the script
    assert "warm_interpreter.py" not in log and "another exception occurred" not in log  # as a cold run prints it
    assert "RuntimeError: boom in attempt 0" in result.stdout + result.stderr  # why it restarted


def test_a_script_without_ddp_starts_before_torch_dynamo_is_imported_and_its_restart_finds_it(
    tmp_path: Path, torchjob_home: Path
) -> None:
    path = probe_job(
        tmp_path, "early", "python", str(INTEGRATION_SCRIPTS / "collective_probe.py"), "--fail-attempt", "0"
    )
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0, result.stderr
    out = torchjob_home / "jobs" / "early" / "output"
    seen = {p.stem.removeprefix("early-"): json.loads(p.read_text()) for p in out.glob("early-*.json")}
    assert set(seen) == {"master-0-0", "worker-0-0", "master-0-1", "worker-0-1"}
    assert {name: probe["sum"] for name, probe in seen.items()} == dict.fromkeys(seen, 2.0)
    assert all(probe["torch_was_loaded"] for probe in seen.values())
    # The first replicas were forked before the warm interpreter imported torch._dynamo; the restart after it.
    assert [seen[name]["dynamo_was_loaded"] for name in ("master-0-0", "worker-0-0")] == [False, False]
    assert [seen[name]["dynamo_was_loaded"] for name in ("master-0-1", "worker-0-1")] == [True, True]
    assert job_object(torchjob_home, "early")["status"]["attempt"] == 1


def test_a_failing_warm_script_fails_the_job_with_its_exit_code_and_reason(tmp_path: Path, torchjob_home: Path) -> None:
    data = make_job("fails").master().workers(1).command("python", str(PROBE), "--fail-attempt", "0").wire()
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["restartPolicy"] = "Never"
    path = tmp_path / "fails.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode != 0
    failed = condition(job_object(torchjob_home, "fails"), "Failed")
    assert failed is not None
    assert "worker-0" in failed["message"] and "boom in attempt 0" in failed["message"]
    exit_record = json.loads((torchjob_home / "jobs" / "fails" / "logs" / "0" / "worker-0.exit.json").read_text())
    assert exit_record["exitCode"] == 1


def test_a_job_that_opts_out_starts_cold(tmp_path: Path, torchjob_home: Path) -> None:
    path = probe_job(tmp_path, "cold", "python", str(PROBE), **{"torchjob.io/warm-start": "false"})
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0, result.stderr
    seen = probes(torchjob_home, "cold")
    assert [p["torch_was_loaded"] for p in seen.values()] == [False, False]
    assert [p["frozen_objects"] for p in seen.values()] == [0, 0]
    assert not (torchjob_home / "jobs" / "cold" / "logs" / "warm.log").exists()


def test_a_command_that_is_not_a_python_script_starts_cold_and_says_why(tmp_path: Path, torchjob_home: Path) -> None:
    path = probe_job(tmp_path, "shell", "sh", "-c", f"exec python {PROBE}")
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0, result.stderr
    assert [p["torch_was_loaded"] for p in probes(torchjob_home, "shell").values()] == [False, False]
    log = (torchjob_home / "jobs" / "shell" / "logs" / "0" / "master-0.log").read_text()
    assert "torchjob: starting cold: 'sh' is not the Python torchjob runs in" in log


def test_ctrl_c_during_a_warm_run_leaves_no_process_and_no_warm_interpreter(
    tmp_path: Path, torchjob_home: Path
) -> None:
    path = probe_job(
        tmp_path, "stopwarm", "python", str(INTEGRATION_SCRIPTS / "worker.py"), "--sleep", "300", "--spawn-child"
    )
    run = start_run(path, torchjob_home)
    out = torchjob_home / "jobs" / "stopwarm" / "output"
    wait_until(lambda: len(list(out.glob("*-0.json"))) == 2, what="both replicas to start")
    marker = json.loads((torchjob_home / "jobs" / "stopwarm" / "local.json").read_text())["job_uid"]
    interpreters = [p for p in _marked(marker) if "(warm interpreter)" in " ".join(p.cmdline())]
    assert len(interpreters) == 1
    run.send_signal(signal.SIGINT)
    run.communicate(timeout=60)
    assert run.returncode == 130
    assert [p for p in all_pids(torchjob_home, "stopwarm") if alive(p)] == []
    wait_until(
        lambda: _marked(marker) == [], timeout=10, what="every process of the job, its warm interpreter too, to end"
    )


def _marked(job_uid: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("TORCHJOB_JOB_UID") == job_uid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found
