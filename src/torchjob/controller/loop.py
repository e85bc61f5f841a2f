"""The reconcile loop shared by every backend: observe, plan, execute, write the status if it changed.

The loop holds no truth of its own: each pass starts from the job object and what the backend observes,
so a controller that restarts picks up where the last one stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from torchjob.api.types import PyTorchJob
from torchjob.backends.base import Backend
from torchjob.controller.clock import Clock, SystemClock
from torchjob.core import conditions
from torchjob.core.actions import DeleteJob
from torchjob.core.observed import ReplicaObservation
from torchjob.core.planning import plan

ACTED_REQUEUE = timedelta(seconds=0.2)


@dataclass(frozen=True)
class PassResult:
    job: PyTorchJob
    observed: list[ReplicaObservation]
    done: bool
    requeue_at: datetime | None


def reconcile_once(job: PyTorchJob, backend: Backend, clock: Clock) -> PassResult:
    """One pass: the job with its new status, what was observed, whether the job is done."""
    job = backend.refresh(job)
    observed = backend.observe(job)
    now = clock.now()
    result = plan(job, observed, now)
    backend.execute(job, result.actions)
    if result.status != job.status:
        job = job.model_copy(update={"status": result.status})
        backend.record_status(job, result.events)
    elif result.events:
        backend.record_status(job, result.events)
    deleted = any(isinstance(a, DeleteJob) for a in result.actions)
    idle = not any(o.phase.live for o in observed)
    done = deleted or (conditions.is_finished(job.status) and idle and not result.actions)
    requeue_at = result.requeue_at
    if result.actions:
        # What was just done (replicas started or stopped) shows in the next observation: look again soon,
        # so the status says Running as soon as the replicas run, not after the idle timeout.
        soon = now + ACTED_REQUEUE
        requeue_at = soon if requeue_at is None else min(requeue_at, soon)
    return PassResult(job, observed, done, requeue_at)


def run_until_done(
    job: PyTorchJob,
    backend: Backend,
    clock: Clock | None = None,
    on_pass: Callable[[PassResult], None] | None = None,
) -> PyTorchJob:
    """Reconcile until the job has finished and none of its replicas is still live."""
    clock = clock or SystemClock()
    while True:
        result = reconcile_once(job, backend, clock)
        job = result.job
        if on_pass is not None:
            on_pass(result)
        if result.done:
            return job
        # A finished job waits only for its replicas to go, not for its TTL (that is enforced on read).
        backend.wait(None if conditions.is_finished(job.status) else result.requeue_at)
