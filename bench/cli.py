"""CLI responsiveness: ``torchjob list`` and ``torchjob get`` with 1,000 job records, and ``torchjob --help``.

The anchor is a bare ``python -c pass``: the cost of starting an interpreter at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.launch import BIN
from bench.measure import median

RECORDS = 1000


def _fill(home: Path) -> None:
    """1,000 finished jobs, written as torchjob writes them."""
    for i in range(RECORDS):
        folder = home / "jobs" / f"job-{i:04d}"
        (folder / "logs" / "0").mkdir(parents=True)
        container = {"name": "pytorch", "image": "x", "command": ["python", "train.py"]}
        job = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": folder.name, "namespace": "default", "creationTimestamp": "2026-11-22T00:00:00Z"},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Worker": {
                        "replicas": 2,
                        "restartPolicy": "OnFailure",
                        "template": {"spec": {"containers": [container]}},
                    }
                }
            },
            "status": {
                "conditions": [
                    {"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "created"},
                    {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded", "message": "done"},
                ],
                "completionTime": "2026-11-22T00:01:00Z",
            },
        }
        (folder / "job.json").write_text(json.dumps(job))
        (folder / "local.json").write_text(json.dumps({"job_file_dir": "/tmp", "processes": []}))
        (folder / "logs" / "0" / "worker-0.log").write_text("x" * 100_000)  # logs must not be read to list


def _time(argv: list[str], env: dict[str, str], trials: int) -> float:
    samples = []
    for _ in range(trials):
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return median(samples)


def measure(trials: int = 7) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    try:
        _fill(home)
        env = {**os.environ, "TORCHJOB_HOME": str(home)}
        torchjob = str(BIN / "torchjob")
        return {
            "list": _time([torchjob, "list"], env, trials),
            "get": _time([torchjob, "get", "job-0500"], env, trials),
            "help": _time([torchjob, "--help"], env, trials),
            "python": _time([sys.executable, "-c", "pass"], env, trials),
        }
    finally:
        shutil.rmtree(home, ignore_errors=True)
