"""What the dashboard shows, shaped from records (pure functions)."""

from __future__ import annotations

from datetime import datetime, timezone

from torchjob.ui import views


def test_curves_are_per_rank_and_split_by_attempt_only_when_there_were_several() -> None:
    one = {0: [{"step": s, "loss": 1.0 / s, "samples_per_second": 10.0} for s in range(1, 4)]}
    assert list(views.chart_series(one)) == ["rank 0"]
    assert views.chart_series(one)["rank 0"]["step"] == [1, 2, 3]
    restarted = {
        0: [{"attempt": 0, "step": s, "loss": 1.0} for s in (1, 2, 3)] + [{"attempt": 1, "step": 3, "loss": 0.5}],
        1: [{"attempt": 0, "step": 1, "loss": 1.0}, {"attempt": 1, "step": 3, "loss": 0.4}],
    }
    series = views.chart_series(restarted)
    assert list(series) == ["attempt 0 · rank 0", "attempt 0 · rank 1", "attempt 1 · rank 0", "attempt 1 · rank 1"]
    assert series["attempt 1 · rank 0"]["step"] == [3]


def test_long_curves_are_thinned_but_keep_their_last_point() -> None:
    many = {0: [{"step": s, "loss": 0.0} for s in range(5001)]}
    steps = views.chart_series(many)["rank 0"]["step"]
    assert len(steps) <= views.MAX_POINTS + 1 and steps[0] == 0 and steps[-1] == 5000


def test_the_timeline_labels_each_attempt_with_its_root_cause() -> None:
    status = {
        "attempts": [
            {
                "attempt": 0,
                "startTime": "2026-11-24T06:00:00Z",
                "endTime": "2026-11-24T06:01:00Z",
                "outcome": "worker-1 was killed by SIGKILL: Rank 2: epoch: 3/8",
            },
            {"attempt": 1, "startTime": "2026-11-24T06:01:05Z", "repairedTime": "2026-11-24T06:02:00Z"},
        ]
    }
    now = datetime(2026, 11, 24, 6, 3, tzinfo=timezone.utc)
    first, second = views.timeline(status, now)
    assert (first["kind"], first["cause"]) == ("failed", "worker-1 was killed by SIGKILL")
    assert (second["kind"], second["end"]) == ("running", "2026-11-24T06:03:00Z")
    assert second["repaired"] == "2026-11-24T06:02:00Z"
