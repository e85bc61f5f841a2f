"""status.trainerStatus (Kubeflow Trainer's progress shape) from the replicas' progress reports."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from torchjob.api.types import PyTorchJob
from torchjob.core.observed import Observed, Platform, ReplicaObservation
from torchjob.core.planning import plan
from torchjob.core.policies.trainer_status import summarize
from torchjob.core.reported import Progress
from torchjob.testing import make_job, running, succeeded

T0 = datetime(2026, 11, 24, 12, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def reporting(name: str, progress: Progress | None) -> ReplicaObservation:
    return replace(running(name), progress=progress)


def test_a_report_is_read_with_its_types_checked() -> None:
    full = {"step": 40, "time": 1.0, "total_steps": 100, "loss": 0.5, "samples_per_second": 80, "seconds_per_step": 2}
    assert Progress.from_report(full, T0) == Progress(T0, 40, 100, 0.5, 80.0, 2.0)
    assert Progress.from_report({"step": 3}, T0) == Progress(T0, 3)
    # Not a report, or fields that cannot be true: dropped rather than shown wrong.
    assert Progress.from_report({"step": "3"}, T0) is None
    assert Progress.from_report({"step": -1}, T0) is None
    odd = {"step": 3, "total_steps": 0, "loss": float("nan"), "samples_per_second": True}
    assert Progress.from_report(odd, T0) == Progress(T0, 3)


def test_the_group_is_as_far_as_its_slowest_replica() -> None:
    status = summarize(
        None,
        [
            reporting("master-0", Progress(at(5), 50, 200, loss=0.25, samples_per_second=100, seconds_per_step=0.5)),
            reporting("worker-0", Progress(at(4), 49, 200, loss=0.5, samples_per_second=90, seconds_per_step=0.5)),
        ],
    )
    assert status is not None
    assert status.progress_percentage == 24  # 49 of 200, rounded down: never ahead of the truth
    assert status.estimated_remaining_seconds == 76  # 151 steps at 0.5 s
    assert {m.name: m.value for m in status.metrics} == {
        "step": "49",
        "totalSteps": "200",
        "loss": "0.25",  # rank 0's
        "samplesPerSecond": "190.0",  # the whole group's
    }
    assert status.last_updated_time == "2026-11-24T12:00:05Z"


def test_no_total_means_no_percentage_and_no_reports_mean_no_status() -> None:
    assert summarize(None, [running("worker-0")]) is None  # a script that does not use torchjob.train
    status = summarize(None, [reporting("worker-0", Progress(at(1), 7))])
    assert status is not None
    assert (status.progress_percentage, status.estimated_remaining_seconds) == (None, None)
    assert [(m.name, m.value) for m in status.metrics] == [("step", "7")]
    # A restarted group that has not reported yet keeps the last known progress.
    assert summarize(status, [running("worker-0", attempt=1)]) == status


def job_with_progress() -> PyTorchJob:
    job = make_job("p").workers(1).build()
    job = job.model_copy(update={"status": plan(job, Observed([]), Platform(), T0).status})
    result = plan(
        job, Observed([reporting("worker-0", Progress(at(1), 9, 10, seconds_per_step=1.0))]), Platform(), at(2)
    )
    return job.model_copy(update={"status": result.status})


def test_the_planner_writes_progress_and_100_percent_on_success() -> None:
    job = job_with_progress()
    assert job.status.trainer_status is not None
    assert (job.status.trainer_status.progress_percentage, job.status.trainer_status.estimated_remaining_seconds) == (
        90,
        1,
    )
    done = plan(job, Observed([succeeded("worker-0")]), Platform(), at(3)).status.trainer_status
    assert done is not None and (done.progress_percentage, done.estimated_remaining_seconds) == (100, 0)
    assert {m.name: m.value for m in done.metrics}["step"] == "10"  # every step was done, reported or not
    wire = job.to_wire()["status"]["trainerStatus"]
    assert set(wire) == {"progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime"}


def test_a_job_that_ends_between_two_passes_still_shows_its_last_report() -> None:
    # The pass before saw no report yet; the next one sees the replica already succeeded, with its last report.
    job = make_job("p").workers(1).build()
    job = job.model_copy(update={"status": plan(job, Observed([]), Platform(), T0).status})
    job = job.model_copy(update={"status": plan(job, Observed([running("worker-0")]), Platform(), at(1)).status})
    assert job.status.trainer_status is None
    last = Progress(at(2), 20, 20, loss=0.125)
    done = plan(job, Observed([replace(succeeded("worker-0"), progress=last)]), Platform(), at(3)).status.trainer_status
    assert done is not None and done.progress_percentage == 100
    assert {m.name: m.value for m in done.metrics} == {"step": "20", "totalSteps": "20", "loss": "0.125"}
