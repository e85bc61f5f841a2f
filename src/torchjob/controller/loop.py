"""The reconcile loop shared by every backend: observe, plan, execute, write the status if it changed.

The loop holds no truth of its own: each pass starts from the job object and what the backend observes,
so a controller that restarts picks up where the last one stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from torchjob.api.types import JobStatus, PyTorchJob
from torchjob.backends.base import Backend
from torchjob.controller.clock import Clock
from torchjob.core import conditions
from torchjob.core.actions import DeleteJob, Event
from torchjob.core.observed import ReplicaObservation
from torchjob.core.planning import plan

ACTED_REQUEUE = timedelta(seconds=0.2)


@dataclass(frozen=True)
class PassResult:
    job: PyTorchJob
    observed: list[ReplicaObservation]
    done: bool
    requeue_at: datetime | None
    events: list[Event]


def reconcile_once(job: PyTorchJob, backend: Backend, clock: Clock) -> PassResult:
    """One pass: the job with its new status, what was observed, whether the job is done."""
    seen = backend.observe(job)
    now = clock.now()
    result = plan(job, seen, backend.platform, now)
    decided = job.model_copy(update={"status": result.status}) if result.status != job.status else job
    # A decision that ends an attempt (a group restart, the job's end) is recorded before it is carried out:
    # stopping a wide group costs a round trip per replica, and the status says why at once. Recording first is
    # safe there, as a stop left undone is planned again (the next pass removes what belongs to an earlier
    # attempt). Anything else is recorded once done: a repair in place changes what the next pass reads.
    first = _ends_attempt(job.status, result.status)
    if first:
        backend.record_status(decided)
    backend.execute(job, result.actions)
    if decided is not job and not first:
        backend.record_status(decided)
    job = decided
    if result.events:
        backend.publish(job, result.events)
    deleted = any(isinstance(a, DeleteJob) for a in result.actions)
    idle = not any(o.phase.live for o in seen.replicas)
    done = deleted or (conditions.is_finished(job.status) and idle and not result.actions)
    requeue_at = result.requeue_at
    if result.actions:
        # What was just done (replicas started or stopped) shows in the next observation: look again soon,
        # so the status says Running as soon as the replicas run, not after the idle timeout.
        soon = now + ACTED_REQUEUE
        requeue_at = soon if requeue_at is None else min(requeue_at, soon)
    return PassResult(job, seen.replicas, done, requeue_at, result.events)


def _ends_attempt(before: JobStatus, after: JobStatus) -> bool:
    return after.attempt != before.attempt or (conditions.is_finished(after) and not conditions.is_finished(before))
