"""`torchjob get` shows the hang deadlines a job runs under, and where each came from."""

from __future__ import annotations

from torchjob.cli.get import summary
from torchjob.testing import make_job


def test_get_shows_the_deadlines_in_force_and_their_source() -> None:
    plain = make_job("plain").workers(1).wire()
    plain["status"] = {}
    shown = summary(plain)
    assert "Deadlines: liveness 10s (default) · start-up 30m (default) · progress not yet (learning from" in shown
    tuned = make_job("tuned").workers(1)
    tuned.annotate(**{"torchjob.io/progress-deadline-seconds": "40", "torchjob.io/liveness-deadline-seconds": "0"})
    wire = tuned.wire()
    wire["status"] = {}
    shown = summary(wire)
    assert "liveness off (torchjob.io/liveness-deadline-seconds)" in shown
    assert "progress 40s (torchjob.io/progress-deadline-seconds)" in shown
