"""Alive is not progressing: the one process that stops beating while the others beat is named within seconds,
with no annotation; stale beats (an earlier attempt, a replaced member) never count."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from torchjob.core.observed import ReplicaObservation
from torchjob.core.policies import progress
from torchjob.core.reported import Progress
from torchjob.testing import make_job, running

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def beating(name: str, last_beat: float, step: int = 5) -> ReplicaObservation:
    return replace(running(name), progress=Progress(at(2), step, alive_at=at(last_beat)))


JOB = make_job("j").master().workers(2).build()


def test_the_one_silent_process_is_named_with_no_annotation() -> None:
    # Nothing says how long the others' steps take: only the liveness deadline (10 s) names the silent one.
    group = [beating("master-0", 30), beating("worker-0", 30), beating("worker-1", 19)]
    verdict = progress.check(JOB, group, at(1), at(30.5), started=at(1))
    assert verdict.hung and verdict.culprit is not None and str(verdict.culprit.replica) == "worker-1"
    assert verdict.message.startswith("Hung: worker-1 stopped beating while the others beat (silent for 12s")
    assert "worker-1 stopped responding, the others wait for it" in verdict.message
    assert verdict.began_at == at(19)
    assert not progress.check(JOB, group, at(1), at(28), started=at(1)).hung  # 9 s: within the deadline


def test_the_pass_is_asked_for_when_the_quietest_process_would_pass_its_liveness_deadline() -> None:
    """Not whenever the reports next wake the job: a wide job's report passes come seconds apart."""
    group = [beating("master-0", 30), beating("worker-0", 30), beating("worker-1", 25)]
    verdict = progress.check(JOB, group, at(1), at(30.5), started=at(1))
    assert not verdict.hung and verdict.check_at == at(25 + 10 + progress.SILENCE_CHECK_MARGIN)
    assert verdict.check_at is not None
    later = (verdict.check_at - T0).total_seconds()
    beaten_on = [beating("master-0", 35), beating("worker-0", 35), group[2]]
    assert progress.check(JOB, beaten_on, at(1), at(later), started=at(1)).hung


def test_the_first_process_a_stalled_machine_stopped_is_not_named_a_beat_before_the_others() -> None:
    """A stalled machine stops every process within a beat of each other: at the moment the first to stop passes
    the liveness deadline, the others are silent nearly as long. They do not witness its silence: nobody is named
    (CI: the replicas of a local job, SIGSTOPped for 14 s, restarted as a hang of the one that stopped 0.1 s first).
    """
    group = [beating("master-0", 19.9), beating("worker-0", 20.0), beating("worker-1", 20.1)]
    verdict = progress.check(JOB, group, at(1), at(29.95), started=at(1))
    assert not verdict.hung
    assert verdict.check_at is not None  # it looks again when the next would pass the deadline
    assert not progress.check(JOB, group, at(1), at(34), started=at(1)).hung  # all three past it: nobody


def stepping(name: str, last_beat: float, last_step: float, longest_gap: float = 0.1) -> ReplicaObservation:
    report = Progress(at(last_step), 50, alive_at=at(last_beat), longest_gap=longest_gap, gaps_seen=40)
    return replace(running(name), progress=report)


def test_a_frozen_process_the_others_wait_for_is_named_within_seconds() -> None:
    # worker-1 froze at second 20 (its last beat 19.6); the others stepped until 20.1 and wait, beating.
    group = [stepping("master-0", 23.8, 20.1), stepping("worker-0", 23.9, 20.1), stepping("worker-1", 19.6, 20.0)]
    verdict = progress.check(JOB, group, at(1), at(24), started=at(1), one_host=True)
    assert verdict.hung and verdict.culprit is not None and str(verdict.culprit.replica) == "worker-1"
    assert verdict.message.startswith("Hung: worker-1 stopped beating while the others beat (silent for 4.4s")
    assert verdict.began_at == at(19.6)
    assert not progress.check(JOB, group, at(1), at(22.9), started=at(1), one_host=True).hung  # 3.3 s: not yet
    # On a cluster a silent Pod may be its lost node, whose witnesses name it (not a counted hang): 10 s there.
    assert not progress.check(JOB, group, at(1), at(24), started=at(1)).hung


def test_the_quick_rule_needs_both_witnesses() -> None:
    # The others still step (within 3x their longest gap of 2 s): a slow rank, not one they wait for.
    slow_steps = [stepping("master-0", 23.8, 20.1, 2.0), stepping("worker-0", 23.9, 20.1, 2.0)]
    slow = [*slow_steps, stepping("worker-1", 19.6, 20.0, 2.0)]
    assert not progress.check(JOB, slow, at(1), at(24), started=at(1), one_host=True).hung
    # The others' beats are stale too: the machine (or this controller) stalled, nobody in particular.
    stale = [stepping("master-0", 21, 20.1), stepping("worker-0", 21, 20.1), stepping("worker-1", 19.6, 20.0)]
    assert not progress.check(JOB, stale, at(1), at(24), started=at(1), one_host=True).hung
    # The silent one is in a named phase (a checkpoint save): that phase's allowance decides.
    saving = replace(
        stepping("worker-1", 19.6, 20.0),
        progress=Progress(
            at(20), 50, alive_at=at(19.6), longest_gap=0.1, gaps_seen=40, section="checkpoint", section_since=at(19.5)
        ),
    )
    waiting = [stepping("master-0", 23.8, 20.1), stepping("worker-0", 23.9, 20.1)]
    assert not progress.check(JOB, [*waiting, saving], at(1), at(24), started=at(1), one_host=True).hung
    # Any liveness annotation is the user's word: the quick rule steps aside.
    patient = make_job("j").master().workers(2).annotate(**{"torchjob.io/liveness-deadline-seconds": "20"}).build()
    group = [*waiting, stepping("worker-1", 19.6, 20.0)]
    assert not progress.check(patient, group, at(1), at(24), started=at(1), one_host=True).hung


def resumed(name: str, last_beat: float, steady_since: float | None, last_step: float = 20.1) -> ReplicaObservation:
    """A process beating steadily again since ``steady_since`` (None: its report does not say)."""
    report = Progress(
        at(last_step),
        50,
        alive_at=at(last_beat),
        longest_gap=0.1,
        gaps_seen=40,
        beating_since=None if steady_since is None else at(steady_since),
    )
    return replace(running(name), progress=report)


def test_a_stall_of_the_whole_machine_is_nobodys_silence() -> None:
    """Every process stopped at second 20 (a paused VM, a swap storm) and they resume one by one: master-0 and
    worker-0 beat steadily again since second 48, worker-1 not yet. Its silence counts from 48, not 19.6."""
    others = [resumed("master-0", 48.9, 48), resumed("worker-0", 48.9, 48)]
    group = [*others, resumed("worker-1", 19.6, 19.6, last_step=20.0)]
    assert not progress.check(JOB, group, at(1), at(49), started=at(1), one_host=True).hung
    cluster = progress.check(JOB, group, at(1), at(49), started=at(1))
    assert not cluster.hung and cluster.check_at == at(48 + 10 + progress.SILENCE_CHECK_MARGIN)
    # worker-1 never comes back, while the others beat on: it is named once they have witnessed its silence.
    later_on = [resumed("master-0", 51.5, 48), resumed("worker-0", 51.5, 48), group[2]]
    quick = progress.check(JOB, later_on, at(1), at(51.6), started=at(1), one_host=True)
    assert quick.hung and quick.culprit is not None and str(quick.culprit.replica) == "worker-1"
    assert quick.message.startswith("Hung: worker-1 stopped beating while the others beat (silent for 32.0s")
    much_later = [resumed("master-0", 58, 48), resumed("worker-0", 58, 48), group[2]]
    verdict = progress.check(JOB, much_later, at(1), at(58.1), started=at(1))
    assert verdict.hung and verdict.culprit is not None and str(verdict.culprit.replica) == "worker-1"
    # Reports that do not say how long they beat steadily (an older torchjob) are judged as before.
    unsaid = [resumed("master-0", 48.9, None), resumed("worker-0", 48.9, None), group[2]]
    assert progress.check(JOB, unsaid, at(1), at(49), started=at(1), one_host=True).hung


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


def test_a_member_silent_while_the_others_step_on_is_not_one_they_wait_for() -> None:
    # An elastic group re-forming: worker-1's torchrun agent is at the rendezvous (no worker, no beats) since
    # second 19, while the others' new group trains on without it yet. torchrun lets it in at the next round.
    group = [stepping("master-0", 30, 29.9), stepping("worker-0", 30, 29.9), stepping("worker-1", 19, 18.5)]
    assert not progress.check(JOB, group, at(1), at(30.5), started=at(1)).hung
    # The others' last step came with the silent one's last beat (the step in flight): they wait for it.
    waiting = [stepping("master-0", 30, 20.5), stepping("worker-0", 30, 20.5), stepping("worker-1", 19, 18.5)]
    verdict = progress.check(JOB, waiting, at(1), at(30.5), started=at(1))
    assert verdict.hung and verdict.culprit is not None and str(verdict.culprit.replica) == "worker-1"


def test_while_an_elastic_group_forms_again_a_member_at_the_rendezvous_is_not_hung() -> None:
    # A membership change at second 20 (torchrun's agents start every worker again): worker-1's agent is still
    # at the rendezvous, with no worker to beat, while worker-0's new worker beats and waits for the group.
    group = [beating("master-0", 40), beating("worker-0", 40), beating("worker-1", 25)]
    reforming = progress.check(JOB, group, at(20), at(40.5), started=at(20), regrouped=True)
    assert not reforming.hung
    assert reforming.check_at is not None and reforming.check_at <= at(20 + progress.REFORM_ALLOWANCE)
    # Past the allowance, the silent one is named as ever (the others never stepped since: they wait for it).
    late = at(20 + progress.REFORM_ALLOWANCE + 1)
    stuck = [beating("master-0", 200.5), beating("worker-0", 200.5), beating("worker-1", 25)]
    assert progress.check(JOB, stuck, at(20), late, started=at(20), regrouped=True).hung


def test_a_process_that_said_it_is_exiting_is_not_silent() -> None:
    """A process that finished said so in its last report; its Pod may look Running for seconds more (a loaded
    node's kubelet reports the exit late) while its peer, finishing too, still beats: not a hang."""

    def finished(exiting: bool) -> ReplicaObservation:
        return replace(running("worker-0"), progress=Progress(at(20), 60, alive_at=at(20), exiting=exiting))

    for one_host in (False, True):
        group = [beating("master-0", 29), finished(exiting=True)]
        verdict = progress.check(JOB, group, at(1), at(30.5), started=at(1), one_host=one_host)
        assert not verdict.hung and verdict.check_at != at(20 + 10 + progress.SILENCE_CHECK_MARGIN)
    # Without its last words, the same silence is a hang.
    verdict = progress.check(JOB, [beating("master-0", 29), finished(exiting=False)], at(1), at(30.5), started=at(1))
    assert verdict.hung and verdict.culprit is not None and str(verdict.culprit.replica) == "worker-0"
