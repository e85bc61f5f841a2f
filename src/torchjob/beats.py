"""How long a process's reporting thread has beaten without a stall: what makes a peer a witness.

Hang detection names the one process that stopped beating while the others beat (``core/policies/progress.py``).
A whole machine can stall too: a paused VM, a swap storm, a disk that blocks every write. Afterwards the
processes resume one by one, and the first to beat again would make the last look silent for the whole stall.
So each report says for how long its thread has beaten steadily (``worker_files.REPORT_BEATING_FOR``): a beat
that comes far later than the thread's period starts the count again. The planner counts a process's silence
only from when the others were beating steadily, so no stall of theirs is taken for its silence.

Torch-free: it runs in every reporting process (``torchjob.autoreport`` and ``torchjob.train.MetricsLogger``).
"""

from __future__ import annotations

import time

# A beat this much later than the previous one ends a steady run (at least; twice the period for slow beats).
# A loaded machine's beats are late by a second at times: that is not a stall.
STALL_SECONDS = 2.5


class SteadyBeats:
    """Counts the seconds since this thread's beats were last interrupted by a stall."""

    def __init__(self, period: float, stall: float | None = None) -> None:
        self.stall = stall if stall is not None else max(STALL_SECONDS, 2 * period)
        self._since: float | None = None
        self._last: float | None = None

    def beat(self, now: float | None = None) -> float:
        """Record a beat now; the seconds this thread has beaten steadily, this beat included."""
        now = time.monotonic() if now is None else now
        if self._last is None or self._since is None or now - self._last > self.stall:
            self._since = now
        self._last = now
        return now - self._since
