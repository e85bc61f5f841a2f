"""The back-off between a crash loop's group restarts (core/policies/backoff.py), as the kubelet backs off a
crashing container: the first restart of a streak at once, then 10 s doubling to a cap; an attempt that trained
long enough ends the streak; the platform's restarts never wait; annotations change or turn it off."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from torchjob.api.types import ConditionType, PyTorchJob
from torchjob.core import conditions
from torchjob.core.actions import CreateReplica, Plan
from torchjob.core.observed import Observed, Platform
from torchjob.core.planning import plan
from torchjob.core.policies import backoff
from torchjob.core.times import timestamp
from torchjob.testing import failed, make_job, running

T0 = datetime(2026, 11, 27, 12, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def step(job: PyTorchJob, observed: list[object], now: datetime) -> tuple[PyTorchJob, Plan]:
    result = plan(job, Observed(observed), Platform(), now)  # type: ignore[arg-type]
    return job.model_copy(update={"status": result.status}), result


def creates(result: Plan) -> list[str]:
    return [f"{a.replica}@{a.attempt}" for a in result.actions if isinstance(a, CreateReplica)]


def crash(job: PyTorchJob, attempt: int, now: float, **failure: object) -> tuple[PyTorchJob, Plan]:
    """The attempt's single worker fails at ``now``."""
    return step(job, [failed("worker-0", attempt, **failure)], at(now))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("streak", "annotations", "seconds"),
    [
        (1, {}, 0.0),  # one failure costs nothing
        (2, {}, 10.0),
        (3, {}, 20.0),
        (6, {}, 160.0),
        (7, {}, 300.0),  # the cap
        (40, {}, 300.0),
        (3, {"torchjob.io/restart-backoff-seconds": "2"}, 4.0),
        (9, {"torchjob.io/restart-backoff-seconds": "2", "torchjob.io/restart-backoff-max-seconds": "30"}, 30.0),
        (5, {"torchjob.io/restart-backoff-seconds": "0"}, 0.0),  # off
    ],
)
def test_the_delay_doubles_from_the_second_restart_of_a_streak_up_to_the_cap(
    streak: int, annotations: dict[str, str], seconds: float
) -> None:
    job = make_job("j").workers(1).annotate(**annotations).build()
    assert backoff.delay(job, streak) == seconds


def test_a_crash_loop_waits_before_its_next_attempt_and_says_when() -> None:
    job, _ = step(make_job("j").workers(1).run_policy(backoffLimit=5).build(), [], at(0))
    job, _ = crash(job, 0, 1)
    job, result = step(job, [], at(2))  # the first restart: at once
    assert creates(result) == ["worker-0@1"] and job.status.next_attempt_time is None

    job, result = crash(job, 1, 5)  # the second in a row: 10 s
    assert job.status.crash_loop_restarts == 2
    assert job.status.next_attempt_time == timestamp(at(15)) and result.requeue_at == at(15)
    assert (
        "back-off: the next attempt starts in 10s (2 restarts in a row)"
        in conditions.find(job.status, ConditionType.RESTARTING).message
    )  # type: ignore[union-attr]
    job, result = step(job, [], at(9))
    assert creates(result) == [] and result.requeue_at == at(15)
    job, result = step(job, [], at(15))
    assert creates(result) == ["worker-0@2"] and job.status.next_attempt_time is None

    job, _ = crash(job, 2, 17)  # the third: 20 s
    job, result = step(job, [], at(30))
    assert creates(result) == [] and job.status.next_attempt_time == timestamp(at(37))


def test_an_attempt_that_trained_ten_minutes_ends_the_streak() -> None:
    job, _ = step(make_job("j").workers(1).run_policy(backoffLimit=5).build(), [], at(0))
    job, _ = crash(job, 0, 1)
    job, _ = step(job, [], at(2))
    job, _ = step(job, [running("worker-0", 1)], at(3))
    job, result = crash(job, 1, 3 + 601)
    assert job.status.crash_loop_restarts == 1 and job.status.next_attempt_time is None
    job, result = step(job, [], at(605))
    assert creates(result) == ["worker-0@2"]


def test_the_platforms_restarts_never_wait_nor_lengthen_the_streak() -> None:
    job, _ = step(make_job("j").workers(1).run_policy(backoffLimit=5).build(), [], at(0))
    job, _ = crash(job, 0, 1)
    job, _ = step(job, [], at(2))
    job, _ = crash(job, 1, 3, exit_code=137, reason="Evicted")
    assert (job.status.restart_count, job.status.crash_loop_restarts) == (1, 1)
    job, result = step(job, [], at(4))
    assert creates(result) == ["worker-0@2"]


def test_the_back_off_annotations_must_be_seconds() -> None:
    from torchjob.api.errors import ValidationError
    from torchjob.api.loading import job_from_mapping

    for key in ("torchjob.io/restart-backoff-seconds", "torchjob.io/restart-backoff-max-seconds"):
        wire = make_job("j").workers(1).annotate(**{key: "soon"}).wire()
        with pytest.raises(ValidationError, match=re.escape(key) + ".*must be a number of seconds"):
            job_from_mapping(wire)
