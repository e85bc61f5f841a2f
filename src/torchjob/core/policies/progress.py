"""Hang detection: an attempt whose ranks all stop reporting progress for ``progressDeadlineSeconds``.

A stalled collective holds every rank of a DDP group until gloo's or NCCL's 30-minute timeout. With the
annotation ``torchjob.io/progress-deadline-seconds`` (Kubeflow ignores annotations), the planner treats an
attempt in which no rank has reported progress (torchjob.train's heartbeat) for that long as failed with
reason Hung, and the group restarts. The attempt's start counts as progress, so start-up has the same
allowance. The rank that stopped at the lowest step is named: it is the one the others are waiting for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from torchjob.api import extensions
from torchjob.api.types import PyTorchJob
from torchjob.core.observed import Phase, ReplicaObservation
from torchjob.core.times import later


@dataclass(frozen=True)
class HangVerdict:
    hung: bool
    message: str = ""
    # When to look again if nothing else happens: the moment the deadline would pass.
    check_at: datetime | None = None


def progress_deadline(job: PyTorchJob) -> float | None:
    value = job.annotation(extensions.PROGRESS_DEADLINE)
    return float(value) if value else None


def check(
    job: PyTorchJob, current: list[ReplicaObservation], attempt_start: datetime | None, now: datetime
) -> HangVerdict:
    seconds = progress_deadline(job)
    running = [o for o in current if o.phase is Phase.RUNNING and not o.stopping]
    if seconds is None or attempt_start is None or not running:
        return HangVerdict(False)
    last = {o.replica: max(o.progress_at or attempt_start, attempt_start) for o in running}
    newest = max(last.values())
    due = later(newest, seconds)
    if now < due:
        return HangVerdict(False, check_at=due)
    steps = {o.replica: o.progress_step for o in running}
    known = [r for r in running if steps[r.replica] is not None]
    if known:
        lowest = min(step for step in steps.values() if step is not None)
        stopped = sorted(str(r.replica) for r in known if steps[r.replica] == lowest)
        detail = f"{', '.join(stopped)} stopped at step {lowest}"
        ahead = sorted({s for s in steps.values() if s is not None and s != lowest})
        if ahead:
            detail += f", the others at step {', '.join(map(str, ahead))}"
    else:
        detail = "no rank reported any progress"
    return HangVerdict(True, f"Hung: no progress for {seconds:g}s (progress deadline); {detail}")
