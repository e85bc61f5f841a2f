"""CLI responsiveness: ``torchjob list`` and ``torchjob get`` with 1,000 job records, and ``torchjob --help``.

The anchor is a bare ``python -c pass``: the cost of starting an interpreter at all.
"""

from __future__ import annotations

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
    """1,000 finished jobs, written through torchjob's own store, each with a 100 kB log."""
    from datetime import datetime, timezone

    from torchjob.api.types import ConditionType
    from torchjob.backends.local.store import JobStore, LocalState
    from torchjob.core import conditions
    from torchjob.testing import make_job

    store = JobStore(home)
    now = datetime.now(timezone.utc)
    template = make_job("job").workers(2).build()
    for i in range(RECORDS):
        job = template.model_copy(deep=True)
        job.metadata.name = f"job-{i:04d}"
        job.metadata.creation_timestamp = "2026-11-22T00:00:00Z"
        conditions.set_condition(job.status, ConditionType.CREATED, "True", conditions.REASON_CREATED, "created", now)
        conditions.set_condition(job.status, ConditionType.SUCCEEDED, "True", conditions.REASON_SUCCEEDED, "done", now)
        store.create(job, LocalState(job_file_dir=str(home)))
        # Logs must not be read to list.
        store.log_path(job.name, 0, "worker-0").parent.mkdir(parents=True, exist_ok=True)
        store.log_path(job.name, 0, "worker-0").write_text("x" * 100_000)


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
