"""Named phases of a training process that are not steps: a checkpoint's save or load, an evaluation.

Hang detection learns how long a job goes between optimizer steps (``core/policies/learned.py``), but a
checkpoint save or an evaluation can take far longer than any gap between steps, and a script that saves
only at the end of an epoch would have its first save taken for a hang. ``torchjob.train`` marks those
phases (``with section("checkpoint-save"):``, and users mark their own, such as an evaluation); the
process's reporter (``torchjob.train.MetricsLogger``, or ``torchjob.autoreport`` for scripts that use
torchjob.train's checkpoints without its logger) puts the phase it is in, and the longest it has seen of
each, in its progress report. The planner then gives the phase its own allowance instead of the step
deadline, and keeps time spent in phases out of the step gaps it learns from.

Torch-free and process-wide (one training loop per process): it imports only the standard library.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torchjob import worker_files

_lock = threading.Lock()
_current: tuple[str, float] | None = None  # (name, monotonic start) of the phase the process is in
_longest: dict[str, float] = {}  # the longest completed duration of each phase, in seconds
_spent = 0.0  # seconds spent in completed phases since the process started


@contextmanager
def section(name: str) -> Iterator[None]:
    """Mark the code in the ``with`` block as the phase ``name`` (e.g. "evaluation"). Phases do not nest:
    an inner one is part of the outer one."""
    global _current, _spent
    with _lock:
        outer = _current is not None
        if not outer:
            _current = (name, time.monotonic())
    try:
        yield
    finally:
        if not outer:
            with _lock:
                assert _current is not None
                duration = time.monotonic() - _current[1]
                _longest[name] = max(_longest.get(name, 0.0), duration)
                _spent += duration
                _current = None


def time_spent() -> float:
    """Seconds this process has spent in phases so far, the one it is in included: what a step gap that
    spans a phase must not count."""
    with _lock:
        running = time.monotonic() - _current[1] if _current is not None else 0.0
        return _spent + running


def report_fields() -> dict[str, Any]:
    """The report's keys for phases: the one the process is in (with the seconds spent in it so far, a
    duration, so a skewed clock cannot distort it) and the longest of each completed one."""
    with _lock:
        fields: dict[str, Any] = {}
        if _current is not None:
            name, started = _current
            fields[worker_files.REPORT_SECTION] = {"name": name, "elapsed": time.monotonic() - started}
        if _longest:
            fields[worker_files.REPORT_SECTIONS_LONGEST] = dict(_longest)
        return fields


class StepGaps:
    """The longest wall time between two consecutive steps of this process, time spent in phases left out:
    what the planner learns the progress deadline from. An epoch boundary's data loading counts (it is
    between steps); a checkpoint save marked as a phase does not (it has its own allowance)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.seen = 0
        self._last: tuple[float, float] | None = None  # (monotonic time, time_spent()) at the last step

    def on_step(self) -> None:
        now, spent = time.monotonic(), time_spent()
        if self._last is not None:
            self.longest = max(self.longest, (now - self._last[0]) - (spent - self._last[1]))
            self.seen += 1
        self._last = (now, spent)

    def report_fields(self) -> dict[str, Any]:
        if not self.seen:
            return {}
        return {worker_files.REPORT_LONGEST_GAP: self.longest, worker_files.REPORT_GAPS_SEEN: self.seen}
