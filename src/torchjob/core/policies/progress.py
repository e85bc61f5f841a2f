"""Hang detection: an attempt whose ranks all stop reporting progress for ``progressDeadlineSeconds``.

A stalled collective holds every rank of a DDP group until gloo's or NCCL's 30-minute timeout. With the
annotation ``torchjob.io/progress-deadline-seconds`` (Kubeflow ignores annotations), the planner treats an
attempt in which no rank has reported progress (torchjob.train's heartbeat) for that long as failed with
reason Hung, and the group restarts. The attempt's start counts as progress, so start-up has the same
allowance. The rank that stopped at the lowest step is named: it is the one the others are waiting for.

Where the platform cannot hear the reports (an operator started without a report address), silence proves
nothing: the deadline is not enforced, and the job is told so once, in an event, rather than killed.
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


UNREPORTED = (
    "the progress deadline is not enforced: this operator receives no progress reports from Pods "
    "(start it with --report-address so that hangs can be detected)"
)


def progress_deadline(job: PyTorchJob) -> float | None:
    value = job.annotation(extensions.PROGRESS_DEADLINE)
    return float(value) if value else None


def check(
    job: PyTorchJob,
    current: list[ReplicaObservation],
    attempt_start: datetime | None,
    now: datetime,
    reports_heard: bool = True,
) -> HangVerdict:
    seconds = progress_deadline(job) if reports_heard else None
    running = [o for o in current if o.phase is Phase.RUNNING and not o.stopping]
    if seconds is None or attempt_start is None or not running:
        return HangVerdict(False)
    last = {o.replica: max(o.progress.at if o.progress else attempt_start, attempt_start) for o in running}
    newest = max(last.values())
    due = later(newest, seconds)
    if now < due:
        return HangVerdict(False, check_at=due)
    steps = {o.replica: o.progress.step if o.progress else None for o in running}
    known = [r for r in running if steps[r.replica] is not None]
    if known:
        lowest = min(step for step in steps.values() if step is not None)
        stopped = sorted((r for r in known if steps[r.replica] == lowest), key=lambda r: str(r.replica))
        silence = max((now - last[r.replica]).total_seconds() for r in stopped)
        names = ", ".join(str(r.replica) for r in stopped)
        detail = f"{names} stopped at step {lowest} (silent for {silence:.0f}s)"
        ahead = sorted({s for s in steps.values() if s is not None and s != lowest})
        if ahead:
            detail += f", the others at step {', '.join(map(str, ahead))}"
    else:
        detail = "no rank reported any progress"
    return HangVerdict(True, f"Hung: no progress for {seconds:g}s (progress deadline); {detail}")
