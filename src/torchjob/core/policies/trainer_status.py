"""The job's training progress (``status.trainerStatus``) from what its replicas last reported.

Kubeflow Trainer's shape (KEP-2779): a percentage, an estimate of the time left, the latest metrics as
strings, and when they were reported. torchjob.train reports them from every rank; a job whose script
reports nothing has no ``trainerStatus`` at all, and a field nobody reported (no total steps: no
percentage) stays absent rather than showing a wrong number.
"""

from __future__ import annotations

import math

from torchjob.api.types import TrainerMetric, TrainerStatus
from torchjob.core.observed import Phase, ReplicaObservation
from torchjob.core.reported import Progress
from torchjob.core.times import timestamp


def summarize(previous: TrainerStatus | None, current: list[ReplicaObservation]) -> TrainerStatus | None:
    """The progress of the running group: as far as its slowest replica (DDP moves in lockstep, so the
    others wait for it), the time that replica still needs, the group's throughput. Until a replica of this
    attempt reports, the last known progress stands (a restarted group resumes from its checkpoint). A
    replica that succeeded counts with its last report: a short job may end between two passes."""
    reporting = (Phase.RUNNING, Phase.SUCCEEDED)
    reports = sorted(
        ((str(o.replica), o.progress) for o in current if o.phase in reporting and o.progress is not None),
        key=lambda pair: pair[0],
    )
    if not reports:
        return previous
    progresses = [p for _, p in reports]
    slowest = min(progresses, key=lambda p: (_fraction(p) or 0.0, p.step))
    metrics = [TrainerMetric(name="step", value=str(slowest.step))]
    if slowest.total_steps is not None:
        metrics.append(TrainerMetric(name="totalSteps", value=str(slowest.total_steps)))
    loss = next((p.loss for p in progresses if p.loss is not None), None)  # the first replica's (rank 0's)
    if loss is not None:
        metrics.append(TrainerMetric(name="loss", value=f"{loss:.4g}"))
    rates = [p.samples_per_second for p in progresses if p.samples_per_second is not None]
    if rates:
        metrics.append(TrainerMetric(name="samplesPerSecond", value=f"{sum(rates):.1f}"))
    fraction = _fraction(slowest)
    return TrainerStatus(
        progress_percentage=None if fraction is None else min(100, math.floor(100 * fraction)),
        estimated_remaining_seconds=_remaining(slowest),
        metrics=metrics,
        last_updated_time=timestamp(max(p.at for p in progresses)),
    )


def completed(previous: TrainerStatus | None) -> TrainerStatus | None:
    """A succeeded job has done all of its steps: 100%, nothing left (only where a percentage was known)."""
    if previous is None or previous.progress_percentage is None:
        return previous
    total = next((m.value for m in previous.metrics if m.name == "totalSteps"), None)
    # The last report may predate the last step (reports are sent once a second): the job did them all.
    metrics = [
        m if m.name != "step" or total is None else TrainerMetric(name="step", value=total) for m in previous.metrics
    ]
    return previous.model_copy(
        update={"progress_percentage": 100, "estimated_remaining_seconds": 0, "metrics": metrics}
    )


def _fraction(progress: Progress) -> float | None:
    if progress.total_steps is None:
        return None
    return min(1.0, progress.step / progress.total_steps)


def _remaining(progress: Progress) -> int | None:
    if progress.total_steps is None or progress.seconds_per_step is None:
        return None
    return max(0, math.ceil((progress.total_steps - progress.step) * progress.seconds_per_step))
