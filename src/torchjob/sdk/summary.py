"""``JobSummary``: the row `torchjob list` shows for one job, the same shape for local and cluster jobs; and
the one reading of a job's State from its wire form."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from torchjob.core.times import age_seconds

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
    # status.trainerStatus.progressPercentage: None when the script reports no progress (or no total).
    progress: int | None = None
    # In-place repair: repairs made, and warm spares "ready/asked" (None when the job keeps no spares).
    repairs: int = 0
    spares: str | None = None


def last_condition(wire: dict[str, Any]) -> dict[str, Any]:
    """A job's last condition in wire form: its type is the job's State (what ``kubectl get`` shows), shown
    with its message. Empty when there is none yet.

    For readers of the wire format (``torchjob get``, the cluster client), which must show any job, even one
    whose spec does not validate; ``torchjob.core.conditions.state`` is the same rule on a typed job."""
    found = (wire.get("status") or {}).get("conditions") or []
    return found[-1] if found and isinstance(found[-1], dict) else {}


def spares_shown(asked: str | None, ready: int) -> str | None:
    """``ready/asked`` warm spares of a job that names ``torchjob.io/spares``; None for one that does not."""
    return f"{ready}/{asked}" if asked else None


def progress_of(wire: dict[str, Any]) -> int | None:
    """The job's progress percentage from its wire status, when its script reports one."""
    value = ((wire.get("status") or {}).get("trainerStatus") or {}).get("progressPercentage")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def from_local_record(name: str, summary: dict[str, Any], now: datetime) -> JobSummary:
    """The row of a local job, from the summary its controller keeps (``backends.local.store``)."""
    return JobSummary(
        name=name,
        state=summary.get("state", ""),
        age_seconds=age_seconds(summary.get("created"), now),
        attempt=summary.get("attempt", 0),
        restarts=summary.get("restarts", 0),
        message=summary.get("message", ""),
        progress=summary.get("progress"),
        repairs=summary.get("repairs", 0),
        spares=spares_shown(summary.get("spares"), summary.get("sparesReady", 0)),
    )
