"""A local replica as the planner sees it: the pure twin of ``backends/kubernetes/mapping.observe_pod``.

The local backend gathers the facts (the shim's exit record, whether torchjob asked the replica to stop, the
preemption notices and heartbeats ``torchjob.train`` wrote, the last lines of its log); this module only
classifies them, so every rule has a unit test that needs no process.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from datetime import datetime, timezone

from torchjob.backends.local.shim import ExitRecord
from torchjob.core.observed import Phase, PlatformReason, ReplicaObservation
from torchjob.core.replicas import ReplicaId
from torchjob.core.reported import MemberAnnouncement, Progress


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def preemption_onset(notices: list[float], started_at: float) -> datetime | None:
    """When the replica's first process got an outside SIGTERM, among notices written since it started (a
    notice from an earlier attempt is stale)."""
    fresh = [t for t in notices if t >= started_at]
    return _utc(min(fresh)) if fresh else None


def slowest(reports: list[Progress]) -> Progress | None:
    """A replica progresses only as fast as its slowest process (one stuck process stalls the replica), and is
    alive only as recently as its quietest process that did not say it is exiting: a frozen process is its
    replica's silence, however its other processes beat (they wait for it in the step). It has beaten steadily
    since the latest of its processes' steady runs began."""
    if not reports:
        return None
    # Exiting only once every process of it said so: one that still runs can still be its silence.
    progress = replace(min(reports, key=lambda p: (p.at, p.step)), exiting=all(p.exiting for p in reports))
    live = [p for p in reports if p.alive_at is not None and not p.exiting]
    if not live or progress.alive_at is None:
        return progress
    # A witness only as long as every one of its processes has beaten steadily.
    steady = [p.beating_since for p in live]
    since = None if any(s is None for s in steady) else max(s for s in steady if s is not None)
    return replace(progress, alive_at=min(p.alive_at for p in live if p.alive_at is not None), beating_since=since)


def observe_process(
    replica: ReplicaId,
    attempt: int,
    ended: ExitRecord | None,
    *,
    stopping: bool,
    notice_at: datetime | None = None,
    progress: Progress | None = None,
    message: str | None = None,
    member: MemberAnnouncement | None = None,
) -> ReplicaObservation:
    """Classify one replica process.

    ``ended`` is None while it runs; ``stopping`` when torchjob asked it to stop; ``notice_at`` its preemption
    notice; ``progress`` its slowest process's heartbeat; ``message`` the last lines of its output.
    """
    # A SIGTERM torchjob did not send came from outside: an eviction or preemption, not the program's fault.
    disrupted_at = None if stopping else notice_at
    if ended is None:
        return ReplicaObservation(
            replica,
            attempt,
            Phase.RUNNING,
            reason=PlatformReason.PREEMPTED if disrupted_at else None,
            stopping=stopping,
            progress=progress,
            disrupted_at=disrupted_at,
            repairable=member is not None,
            member=member,
        )
    finished = _utc(ended.finished_at)
    if ended.signal is None and ended.exit_code == 0:
        # Its last report stands: a short job may end before any pass saw it run (trainerStatus needs it).
        return ReplicaObservation(
            replica, attempt, Phase.SUCCEEDED, exit_code=0, finished_at=finished, progress=progress
        )
    terminated = ended.signal == signal.SIGTERM or (ended.signal is None and ended.exit_code == 128 + signal.SIGTERM)
    preempted = not stopping and (terminated or disrupted_at is not None)
    return ReplicaObservation(
        replica,
        attempt,
        Phase.FAILED,
        exit_code=ended.exit_code,
        signal=ended.signal,
        finished_at=finished,
        reason=PlatformReason.PREEMPTED if preempted else None,
        stopping=stopping,
        message=message,
        disrupted_at=disrupted_at,
        repairable=member is not None,
    )
