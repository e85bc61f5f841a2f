"""Hang detection with no tuning, for a script that never imports torchjob (#31).

- **A frozen rank.** The plain MNIST script (``examples/mnist/train_plain.py``: no torchjob import) as a
  1 Master + 1 Worker job with no annotation; once it has done 20 optimizer steps, the Worker's training
  process is SIGSTOPped. Measured: from the stop to the attempt's end as Hung (its ``endTime`` is when the
  planner decided), and whether the job then Succeeded. The anchors, which cannot run in the same invocation
  for their length, are stated: gloo's default collective timeout (30 minutes), NVIDIA's resiliency extension's
  default heartbeat timeouts (45 and 60 minutes), and torchrun/Kubeflow, which never decide.
- **A deadlock.** A plain DDP loop stops one rank between collectives (alive, so it beats; the other waits
  in the next all-reduce), no annotation: from the stop to the Hung verdict, found by the progress deadline
  learned from the job's own step gaps (``core/policies/learned.py``), and whether the job then Succeeded.
- **A slow start under load.** The plain MNIST script behind a 60 s start (``sleep 60``), a 20 s progress
  deadline, and two CPU hogs beside it, ten times: every run must Succeed on its first attempt (no false
  alarm). The step time and the longest step gap seen are reported beside the deadline learned meanwhile.

``python -m bench --only hangs``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import yaml
from tests.support.load import cpu_hogs

from bench.measure import BIN, start_launcher, stop_launcher
from bench.records import Run
from torchjob.testing import make_job

ROOT = Path(__file__).resolve().parents[1]
PLAIN = ROOT / "examples" / "mnist" / "train_plain.py"
# A plain DDP loop (no torchjob import) whose first run stops one rank between collectives: a deadlock.
DEADLOCK = ROOT / "tests" / "integration" / "scripts" / "plain_deadlock.py"
SLOW_TRIALS = 10  # a slow start under load, every one of which must pass: no false alarm


def _run(work: Path, name: str, command: list[str], annotations: dict[str, str]) -> subprocess.Popen[bytes]:
    job = make_job(name).master().workers(1).command(*command).annotate(**annotations).wire()
    (work / "job.yaml").write_text(yaml.safe_dump(job))
    env = {**os.environ, "TORCHJOB_HOME": str(work / "home")}
    argv = [str(BIN / "torchjob"), "run", str(work / "job.yaml")]
    return start_launcher(argv, env)


def _status(work: Path, name: str) -> dict[str, Any]:
    try:
        return dict(json.loads((work / "home" / "jobs" / name / "job.json").read_text()).get("status") or {})
    except (OSError, ValueError):
        return {}


def _step(work: Path, name: str, process: str) -> int:
    try:
        return int(
            json.loads((work / "home" / "jobs" / name / "output" / "heartbeat" / f"{process}.json").read_text())["step"]
        )
    except (OSError, ValueError, KeyError):
        return -1


def _trainer(work: Path, name: str) -> psutil.Process | None:
    local = json.loads((work / "home" / "jobs" / name / "local.json").read_text())
    shim = next(p["pid"] for p in local["processes"] if p["replica"] == "worker-0" and p["attempt"] == 0)
    found = [c for c in psutil.Process(shim).children(recursive=True) if "train_plain.py" in " ".join(c.cmdline())]
    return found[0] if found else None


def frozen_trial() -> tuple[float | None, bool]:
    """Seconds from the SIGSTOP to the Hung verdict (None: not found in 120 s), and whether the job Succeeded."""
    with tempfile.TemporaryDirectory(prefix="bench-hang-") as folder:
        work = Path(folder)
        run = _run(
            work, "frozen", ["python", str(PLAIN), "--epochs", "3"], {"torchjob.io/termination-grace-seconds": "2"}
        )
        try:
            deadline = time.monotonic() + 180
            while _step(work, "frozen", "worker-0-0") < 20 and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            trainer = _trainer(work, "frozen")
            if trainer is None or run.poll() is not None:
                return None, False
            trainer.send_signal(signal.SIGSTOP)
            stopped = time.time()
            run.wait(timeout=400)
        finally:
            stop_launcher(run)
        status = _status(work, "frozen")
        return _hung_after(status, "Hung:", stopped), _succeeded(status)


def _hung_after(status: dict[str, Any], verdict: str, stopped: float) -> float | None:
    """Seconds from ``stopped`` to the end of the first attempt, when it ended with an outcome starting with
    ``verdict``; None when it did not."""
    attempts = status.get("attempts") or []
    ended = attempts[0].get("endTime") if attempts else None
    if not ended or not str(attempts[0].get("outcome", "")).startswith(verdict):
        return None
    return datetime.fromisoformat(str(ended).replace("Z", "+00:00")).timestamp() - stopped


def _succeeded(status: dict[str, Any]) -> bool:
    return any(c["type"] == "Succeeded" and c["status"] == "True" for c in status.get("conditions", []))


def slow_start_trial(start_seconds: int, deadline: int) -> tuple[bool, float | None, dict[str, Any]]:
    """Whether the job Succeeded on its first attempt, its seconds per step (as last reported), and the
    deadlines learned meanwhile (``status.learnedDeadlines``)."""
    with cpu_hogs(2), tempfile.TemporaryDirectory(prefix="bench-slow-") as folder:
        work = Path(folder)
        command = ["sh", "-c", f"sleep {start_seconds}; exec {sys.executable} {PLAIN} --epochs 1"]
        run = _run(work, "slow", command, {"torchjob.io/progress-deadline-seconds": str(deadline)})
        run.wait(timeout=900)
        status = _status(work, "slow")
        beat = work / "home" / "jobs" / "slow" / "output" / "heartbeat" / "worker-0-0.json"
        per_step = json.loads(beat.read_text()).get("seconds_per_step") if beat.exists() else None
        clean = run.returncode == 0 and status.get("attempt") == 0 and not status.get("restartCount")
        return clean, per_step, dict(status.get("learnedDeadlines") or {})


def deadlock_trial() -> tuple[float | None, float | None, bool]:
    """A plain script deadlocks (one rank stops between collectives, alive) with no annotation: seconds from
    the stop to the Hung verdict (None: not found), the learned deadline, and whether the job Succeeded."""
    with tempfile.TemporaryDirectory(prefix="bench-deadlock-") as folder:
        work = Path(folder)
        marker = work / "first-run-over"
        run = _run(work, "deadlock", ["python", str(DEADLOCK), "--marker", str(marker)], {})
        try:
            run.wait(timeout=400)
        finally:
            stop_launcher(run)
        status = _status(work, "deadlock")
        stopped = marker.stat().st_mtime if marker.exists() else None
        seconds = _hung_after(status, "Hung: no progress", stopped) if stopped is not None else None
        learned = (status.get("learnedDeadlines") or {}).get("progressSeconds")
        return seconds, learned, _succeeded(status)


def record(run: Run, trials: int) -> None:
    samples: dict[str, list[float | None]] = {}

    def keep(case: str, value: float | None) -> None:
        samples.setdefault(case, []).append(value)

    for _ in range(trials):
        seconds, succeeded = frozen_trial()
        keep("frozen named hung", seconds)
        keep("frozen succeeded", float(succeeded))
        seconds, learned, succeeded = deadlock_trial()
        keep("deadlock named hung", seconds)
        keep("deadlock learned deadline", learned)
        keep("deadlock succeeded", float(succeeded))
    for _ in range(SLOW_TRIALS):
        clean, per_step, learned_deadlines = slow_start_trial(60, 20)
        keep("slow start clean", float(clean))
        keep("slow start step", per_step)
        keep("slow start longest gap", learned_deadlines.get("longestStepGapSeconds"))
        keep("slow start learned deadline", learned_deadlines.get("progressSeconds"))
    for case, values in samples.items():
        run.add(case, values, "" if "succeeded" in case or "clean" in case else "s")
