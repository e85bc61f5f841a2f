"""activeDeadlineSeconds, enforced from ``startTime`` by the planner's own clock.

Kubeflow checks the deadline only when some other event happens to trigger a reconcile (kubeflow/trainer
#3358), so an idle hung job outlives it. Here the planner returns the deadline as a requeue time, and the
controller loop wakes up for it.
"""

from __future__ import annotations

from datetime import datetime

from torchjob.api.types import JobStatus, PyTorchJob
from torchjob.core.times import later, parse_timestamp


def deadline(job: PyTorchJob, status: JobStatus) -> datetime | None:
    seconds = job.spec.run_policy.active_deadline_seconds
    if seconds is None or not status.start_time:
        return None
    return later(parse_timestamp(status.start_time), seconds)


def deadline_passed(job: PyTorchJob, status: JobStatus, now: datetime) -> bool:
    due = deadline(job, status)
    return due is not None and now >= due
