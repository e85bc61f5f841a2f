"""Reading what a local job's processes wrote: the log files of an attempt, the metrics of every rank, and
the heartbeats and preemption notices of a replica's processes.

Layout (see ``store.py`` and ``worker_files.py``): ``logs/<attempt>/<replica>.log``,
``output/metrics/rank-<rank>.jsonl``, ``output/heartbeat/<replica>-<local rank>.json`` and
``output/preempted/...``. Readers only; a file being written as it is read is never an error.
"""

from __future__ import annotations

import contextlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from torchjob import worker_files
from torchjob.core.reported import Progress


class NoSuchAttempt(Exception):
    """The job has no logs for the attempt asked for; the message says which it has."""


def attempts_with_logs(logs_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in logs_dir.glob("*") if p.name.isdigit() and p.is_dir())


def log_files(logs_dir: Path, attempt: int | None, current: int) -> dict[str, Path]:
    """Replica name → log file of ``attempt`` (0 is the first). Without one: the ``current`` attempt's, or
    the newest that has output while the current one starts (a group being restarted)."""
    started = attempts_with_logs(logs_dir)
    if attempt is not None:
        if attempt not in started:
            have = f"attempts {started[0]}–{started[-1]}" if len(started) > 1 else f"attempt {started[0]}"
            raise NoSuchAttempt(f"has no attempt {attempt}; it has {have if started else 'none yet'}")
        chosen: int | None = attempt
    else:
        chosen = max((a for a in started if a <= current), default=None)
    return {} if chosen is None else {p.stem: p for p in sorted((logs_dir / str(chosen)).glob("*.log"))}


def rank_metrics(output_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """Rank → its step records, from the JSONL files torchjob.train writes."""
    found: dict[int, list[dict[str, Any]]] = {}
    for path in sorted((output_dir / worker_files.METRICS_DIR).glob("rank-*.jsonl")):
        rank_text = path.stem.removeprefix("rank-")
        if not rank_text.isdigit():
            continue
        with open(path, errors="replace") as f:
            # A line being written as we read is simply not complete yet; a damaged one is skipped.
            found[int(rank_text)] = [r for r in map(_json_record, f) if r is not None]
    return found


def _json_record(line: str) -> dict[str, Any] | None:
    if not line.endswith("\n"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def notice_times(output_dir: Path, replica: str) -> list[float]:
    """When each process of ``replica`` got an outside SIGTERM (a damaged notice is skipped)."""
    times = []
    for path in worker_files.replica_files(output_dir / worker_files.PREEMPTED_DIR, replica):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            times.append(float(json.loads(path.read_text())["time"]))
    return times


def heartbeats(output_dir: Path, replica: str, since: float) -> list[Progress]:
    """The last heartbeat of each process of ``replica`` written since ``since`` (one from an earlier attempt
    is stale; a damaged one, or one being written, is skipped)."""
    reports = []
    for path in worker_files.replica_files(output_dir / worker_files.HEARTBEAT_DIR, replica):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            report = json.loads(path.read_text())
            written = float(report[worker_files.REPORT_TIME])
            alive = report.get(worker_files.REPORT_ALIVE)
            alive_at = datetime.fromtimestamp(float(alive), timezone.utc) if alive is not None else None
            progress = Progress.from_report(report, datetime.fromtimestamp(written, timezone.utc), alive_at)
            if progress is not None and written >= since:
                reports.append(progress)
    return reports
