"""backoffLimit and the back-off between a crash loop's restarts.

**The limit**: how many group restarts a job may take before it is Failed. Every restart of the group counts,
whatever the restart policy (Kubeflow never trips the limit under ExitCode because recreated pods reset
restartCount: kubeflow/trainer #2045, #2342). Restarts caused by the platform (eviction, preemption) do not
count: the job did nothing wrong.

**The back-off**: a group that keeps failing waits before its next attempt, as the kubelet waits before it
restarts a crashing container, so that a script that cannot start does not hold its nodes in a tight loop nor
flood the logs: the first restart of a streak at once (one failure costs nothing), then 10 s, 20 s, 40 s… up to
5 minutes (``torchjob.io/restart-backoff-seconds``, ``torchjob.io/restart-backoff-max-seconds``; "0" turns it
off). An attempt that trained for 10 minutes before it failed ends the streak, as a container that ran that long
resets the kubelet's; the platform's restarts never wait and leave the streak as it was.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from torchjob.api import extensions
from torchjob.api.types import PyTorchJob
from torchjob.core.times import parse_timestamp


def backoff_limit(job: PyTorchJob) -> int:
    limit = job.spec.run_policy.backoff_limit
    return extensions.DEFAULT_BACKOFF_LIMIT if limit is None else limit


def may_restart(job: PyTorchJob, restarts_so_far: int) -> bool:
    return restarts_so_far < backoff_limit(job)


def _seconds(job: PyTorchJob, annotation: str, default: float) -> float:
    value = job.annotation(annotation)
    return default if value is None else float(value)  # validated at load (extensions.ANNOTATION_RULES)


def streak_after(streak: int, attempt_started: datetime | None, now: datetime) -> int:
    """The crash loop's counted restarts in a row once the current attempt fails now: one more, or a new streak
    of one where the attempt trained long enough (``RESTART_BACKOFF_RESET``) to show the loop was over."""
    if attempt_started is not None and (now - attempt_started).total_seconds() >= extensions.RESTART_BACKOFF_RESET:
        return 1
    return streak + 1


def delay(job: PyTorchJob, streak: int) -> float:
    """Seconds before the next attempt after the ``streak``-th counted restart in a row: none for the first."""
    initial = _seconds(job, extensions.RESTART_BACKOFF, extensions.DEFAULT_RESTART_BACKOFF)
    cap = _seconds(job, extensions.RESTART_BACKOFF_MAX, extensions.DEFAULT_RESTART_BACKOFF_MAX)
    if streak < 2 or initial <= 0:
        return 0.0
    return float(min(initial * 2.0 ** min(streak - 2, 32), cap))


def waits_until(next_attempt_time: str | None, now: datetime) -> datetime | None:
    """When the next attempt may start, while it may not yet."""
    if next_attempt_time is None:
        return None
    due = parse_timestamp(next_attempt_time)
    return due if due > now else None


def next_attempt_at(now: datetime, seconds: float) -> datetime:
    return now + timedelta(seconds=seconds)
