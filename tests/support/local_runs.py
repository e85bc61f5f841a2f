"""Local runs of a job for tests: write a job file around tests/integration/scripts/worker.py, start
``torchjob run`` in its own process, read back what ran (the job object, its replicas' records and processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import INTEGRATION_SCRIPTS
from torchjob.testing import make_job

WORKER = INTEGRATION_SCRIPTS / "worker.py"
# The in-place test script's global batch (in_place_train.py): step s trains on samples 6s to 6s + 5, whatever the
# group's size.
IN_PLACE_GLOBAL_BATCH = 6


def write_job(
    tmp_path: Path,
    name: str,
    *worker_args: str,
    workers: int = 2,
    master: bool = True,
    restart_policy: str = "OnFailure",
    grace: str = "3",
    **run_policy: Any,
) -> Path:
    builder = make_job(name)
    if master:
        builder.master()
    builder.workers(workers).command("python", str(WORKER), *worker_args).restart_policy(restart_policy)
    builder.annotate(**{"torchjob.io/termination-grace-seconds": grace})
    if run_policy:
        builder.run_policy(**run_policy)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(builder.wire()))
    return path


def start_run(path: Path, home: Path) -> subprocess.Popen[str]:
    """``torchjob run PATH`` as its own process against the state directory ``home``, output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "torchjob.cli.main", "run", str(path)],
        env={**os.environ, "TORCHJOB_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def job_object(home: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((home / "jobs" / name / "job.json").read_text())
    return data


def replica_records(home: Path, name: str) -> dict[str, dict[str, str]]:
    """What each replica recorded of itself, keyed ``worker-1-0`` (replica-attempt)."""
    out = home / "jobs" / name / "output"
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*-*.json")}


def all_pids(home: Path, name: str) -> list[int]:
    """Every process the job ever had: shims, replica processes and their children."""
    state = json.loads((home / "jobs" / name / "local.json").read_text())
    pids = [p["pid"] for p in state["processes"] if p["pid"]]
    for record in replica_records(home, name).values():
        pids += [int(record[k]) for k in ("pid", "child_pid") if k in record]
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def condition(job: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in job["status"]["conditions"] if c["type"] == ctype), None)


def job_file(tmp_path: Path, builder: Any) -> Path:
    """``tmp_path/job.yaml`` holding the job a ``torchjob.testing.make_job()`` builder describes."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(builder.wire()))
    return path


def shim_pid(home: Path, job: str, replica: str) -> int:
    """The pid of the shim that runs ``replica`` now (its training process is the shim's child)."""
    state = json.loads((home / "jobs" / job / "local.json").read_text())
    return int(next(p["pid"] for p in state["processes"] if p["replica"] == replica and p.get("gone_at") is None))


def trained(home: Path, job: str, replica: str) -> list[dict[str, object]]:
    """The steps a replica of the in-place test script recorded, in order (``trained-REPLICA.jsonl``)."""
    path = home / "jobs" / job / "output" / f"trained-{replica}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
