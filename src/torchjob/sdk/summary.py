"""``JobSummary``: the row `torchjob list` shows for one job, the same shape for local and cluster jobs."""

from __future__ import annotations

from dataclasses import dataclass

# The state shown for a local job whose records cannot be read; `torchjob delete` still removes it.
UNREADABLE = "Unreadable"


@dataclass(frozen=True)
class JobSummary:
    name: str
    state: str
    age_seconds: float
    attempt: int
    restarts: int
    message: str
