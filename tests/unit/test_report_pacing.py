"""How often a job's reports call for a pass over it: every 2 s for a small job, further apart as its reports
grow (each pass reads every Pod of the job), never rarer than every 10 s; and at once when one of its Pods falls
quiet (the pass that probes the Pod's node), whatever the pacing."""

from __future__ import annotations

import pytest

from torchjob.controller.report_channel import (
    MOST_REPORT_PASS_SECONDS,
    REPORT_PASS_SECONDS,
    QuietReporters,
    ReportPacing,
)

JOB = ("team-a", "mnist")


def asked(pacing: ReportPacing, reports_per_second: int, seconds: int, start: float = 0.0) -> list[float]:
    """The delays asked for while ``reports_per_second`` reports come, evenly, for ``seconds``."""
    delays = []
    for tick in range(seconds * reports_per_second):
        delay = pacing.heard(JOB, start + tick / reports_per_second)
        if delay is not None:
            delays.append(delay)
    return delays


def test_a_small_job_is_looked_at_every_two_seconds() -> None:
    assert asked(ReportPacing(), 3, 10) == [REPORT_PASS_SECONDS] * 5


def test_a_wide_job_is_looked_at_less_often_and_never_rarer_than_the_most() -> None:
    # The first window's rate is not known yet: 2 s; then 1,024 reports a second, a pass each 4 s.
    assert asked(ReportPacing(), 1024, 20) == pytest.approx([REPORT_PASS_SECONDS, 4.0, 4.0, 4.0, 4.0, 4.0], abs=0.01)
    assert asked(ReportPacing(), 8192, 30) == [REPORT_PASS_SECONDS, *[MOST_REPORT_PASS_SECONDS] * 3]


def test_each_job_is_paced_apart() -> None:
    pacing = ReportPacing()
    assert pacing.heard(JOB, 0.0) == REPORT_PASS_SECONDS
    assert pacing.heard(("team-a", "other"), 0.5) == REPORT_PASS_SECONDS
    assert pacing.heard(JOB, 1.0) is None


def test_a_pod_that_falls_quiet_has_its_job_looked_at_once_per_silence() -> None:
    quiet = QuietReporters(quiet_seconds=1.5)
    other = ("team-a", "other")
    for uid, key in (("a", JOB), ("b", JOB), ("c", other)):
        quiet.heard(uid, key, 0.0)
    quiet.heard("c", other, 1.0)
    assert quiet.fell_quiet(1.4) == set()
    assert quiet.fell_quiet(1.6) == {JOB}  # a and b together (a vanished node's replicas): one look
    assert quiet.fell_quiet(2.0) == set()  # the same silence is not news
    assert quiet.fell_quiet(2.6) == {other}
    quiet.heard("a", JOB, 3.0)  # heard again, then quiet again: a new silence
    assert quiet.fell_quiet(4.0) == set()
    assert quiet.fell_quiet(4.6) == {JOB}


def test_a_pod_silent_for_long_is_forgotten() -> None:
    quiet = QuietReporters(quiet_seconds=1.5)
    quiet.heard("gone", JOB, 0.0)
    assert quiet.fell_quiet(2.0) == {JOB}
    assert quiet.fell_quiet(10_000.0) == set()
    quiet.heard("new", JOB, 10_000.0)
    assert quiet.fell_quiet(10_002.0) == {JOB}  # the forgotten Pod's uid took no room and holds nothing back
