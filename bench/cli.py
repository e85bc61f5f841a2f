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

from bench.measure import BIN
from bench.records import Run

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


def _seconds(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def record(run: Run, trials: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    try:
        _fill(home)
        env = {**os.environ, "TORCHJOB_HOME": str(home)}
        torchjob = str(BIN / "torchjob")
        commands = {
            "list": [torchjob, "list"],
            "get": [torchjob, "get", "job-0500"],
            "help": [torchjob, "--help"],
            "python": [sys.executable, "-c", "pass"],
        }
        samples: dict[str, list[float | None]] = {case: [] for case in commands}
        for _ in range(trials):  # interleaved with the anchor
            for case, argv in commands.items():
                samples[case].append(_seconds(argv, env))
        for case, values in samples.items():
            run.add(case, values)
    finally:
        shutil.rmtree(home, ignore_errors=True)
