"""Alive is not progressing: the one process that stops beating while the others beat is named within seconds,
with no annotation; stale beats (an earlier attempt, a replaced member) never count."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from torchjob.core.heard import Progress
from torchjob.core.observed import ReplicaObservation
from torchjob.core.policies import progress
from torchjob.testing import make_job, running

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def beating(name: str, last_beat: float, step: int = 5) -> ReplicaObservation:
    return replace(running(name), progress=Progress(at(2), step, alive_at=at(last_beat)))


JOB = make_job("j").master().workers(2).build()


def test_the_one_silent_process_is_named_with_no_annotation() -> None:
    group = [beating("master-0", 30), beating("worker-0", 30), beating("worker-1", 19)]
    verdict = progress.check(JOB, group, at(1), at(30.5), started=at(1))
    assert verdict.hung and verdict.culprit is not None and str(verdict.culprit.replica) == "worker-1"
    assert verdict.message.startswith("Hung: worker-1 stopped beating while the others beat (silent for 12s")
    assert "worker-1 stopped responding, the others wait for it" in verdict.message
    assert verdict.began_at == at(19)
    assert not progress.check(JOB, group, at(1), at(28), started=at(1)).hung  # 9 s: within the deadline


def test_stale_beats_and_a_whole_silent_group_are_not_a_liveness_verdict() -> None:
    # worker-1's last beat predates the repair at second 20 (it was the lost member the spare replaced):
    # it has not beaten since, so nobody is compared with it yet.
    after_repair = [beating("master-0", 40), beating("worker-0", 40), beating("worker-1", 15)]
    assert not progress.check(JOB, after_repair, at(20), at(40.5), started=at(1)).hung
    # Everyone silent: a deadlock or a stopped machine, not one process (the progress deadline's job).
    all_quiet = [beating("master-0", 10), beating("worker-0", 10), beating("worker-1", 10)]
    assert not progress.check(JOB, all_quiet, at(1), at(60), started=at(1)).hung
    # A script that does not beat at all (no reports): nothing to compare.
    assert not progress.check(JOB, [running("master-0"), running("worker-0")], at(1), at(600), started=at(1)).hung
    # A group of one has nobody to compare with.
    alone = make_job("one").workers(1).build()
    assert not progress.check(alone, [beating("worker-0", 1)], at(0.5), at(600), started=at(0.5)).hung


def test_the_liveness_deadline_is_an_annotation_and_zero_turns_it_off() -> None:
    group = [beating("master-0", 30), beating("worker-0", 30), beating("worker-1", 19)]
    patient = make_job("j").master().workers(2).annotate(**{"torchjob.io/liveness-deadline-seconds": "20"}).build()
    assert not progress.check(patient, group, at(1), at(30.5), started=at(1)).hung
    off = make_job("j").master().workers(2).annotate(**{"torchjob.io/liveness-deadline-seconds": "0"}).build()
    assert not progress.check(off, group, at(1), at(300), started=at(1)).hung
    unheard = progress.check(JOB, group, at(1), at(30.5), reports_heard=False, started=at(1))
    assert not unheard.hung  # where reports cannot be heard, silence proves nothing
