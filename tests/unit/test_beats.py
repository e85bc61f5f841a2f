"""A reporting thread says how long it has beaten without a stall, and the planner dates that run by its beat."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from torchjob.beats import STALL_SECONDS, SteadyBeats
from torchjob.core.reported import Progress

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def test_a_beat_far_later_than_the_last_starts_the_steady_run_again() -> None:
    beats = SteadyBeats(period=1.0)
    assert [beats.beat(t) for t in (100.0, 101.0, 102.5, 104.0)] == [0.0, 1.0, 2.5, 4.0]  # late by a second: steady
    assert beats.beat(104.0 + STALL_SECONDS + 0.5) == 0.0  # a stall (a paused machine): counted from now again
    assert beats.beat(108.0) == 1.0


def test_a_slow_beating_thread_is_not_always_stalled() -> None:
    beats = SteadyBeats(period=5.0)  # MetricsLogger(heartbeat_seconds=5)
    assert [beats.beat(t) for t in (0.0, 5.0, 10.5, 25.0)] == [0.0, 5.0, 10.5, 0.0]


def test_a_report_dates_its_steady_run_by_its_beat() -> None:
    report = {"step": 3, "alive": 1.0, "beating_for": 12.5}
    progress = Progress.from_report(report, T0, alive_at=T0)
    assert progress is not None and progress.beating_since == T0 - timedelta(seconds=12.5)
    for odd in ({"step": 3}, {"step": 3, "beating_for": -1}, {"step": 3, "beating_for": "12"}):
        found = Progress.from_report(odd, T0, alive_at=T0)
        assert found is not None and found.beating_since is None
    assert Progress.from_report({"step": 3, "beating_for": 1.0}, T0) == Progress(T0, 3)  # no beat: nothing to date
