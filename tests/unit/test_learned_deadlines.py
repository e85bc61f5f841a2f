"""Deadlines that need no tuning: learned from the job's own step gaps after a warm-up, kept in the status,
overridden by annotations; a named phase (a checkpoint save, an evaluation) has an allowance of its own."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from torchjob.api.types import LearnedDeadlines
from torchjob.cli.get import summary
from torchjob.core.actions import Plan
from torchjob.core.observed import Observed, Platform, ReplicaObservation
from torchjob.core.planning import plan
from torchjob.core.policies import learned, progress
from torchjob.core.reported import Progress
from torchjob.testing import make_job, running

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
JOB = make_job("j").master().workers(1).build()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def stepping(
    name: str, step_at: float, step: int, gap: float | None = 0.2, seen: int = 20, **more: object
) -> ReplicaObservation:
    report = Progress(at(step_at), step, alive_at=at(step_at), longest_gap=gap, gaps_seen=seen, **more)  # type: ignore[arg-type]
    return replace(running(name), progress=report)


def test_the_progress_deadline_is_learned_after_the_warm_up_with_a_floor_and_only_grows() -> None:
    warming = [stepping("master-0", 5, 8, gap=0.2, seen=7), stepping("worker-0", 5, 8, gap=0.3, seen=7)]
    assert learned.learn(None, warming) is None  # nobody has seen 10 gaps yet

    fast = learned.learn(None, [stepping("master-0", 5, 20, gap=0.2), stepping("worker-0", 5, 20, gap=0.3)])
    assert fast == LearnedDeadlines(progress_seconds=20, longest_step_gap_seconds=0.3)  # 5 × 0.3 s < the 20 s floor

    slow = learned.learn(fast, [stepping("master-0", 9, 40, gap=7.01)])  # an epoch boundary: 7 s between steps
    assert slow is not None and slow.progress_seconds == 36 and slow.longest_step_gap_seconds == 7.01
    assert learned.learn(slow, [stepping("master-0", 9, 41, gap=0.1)]) is slow  # never shrinks, nothing rewritten
    assert learned.learn(slow, [stepping("master-0", 9, 41, gap=7.2)]) is slow  # a 3 % growth is not worth a write


def test_phases_learn_their_own_allowance_above_a_generous_floor() -> None:
    saves = [stepping("master-0", 5, 20, sections_longest={"checkpoint-save": 90.0, "evaluation": 2.0})]
    found = learned.learn(None, saves)
    assert found is not None and found.section_seconds == {"checkpoint-save": 450, "evaluation": 300}
    annotated = make_job("a").workers(1).annotate(**{"torchjob.io/section-deadline-seconds": "60"}).build()
    assert learned.section_allowance(annotated, found, "checkpoint-save") == 60
    assert learned.section_allowance(JOB, found, "checkpoint-save") == 450
    assert learned.section_allowance(JOB, found, "never-seen") == learned.SECTION_FLOOR


def test_with_no_annotation_a_deadlock_is_found_by_the_learned_deadline() -> None:
    known = LearnedDeadlines(progress_seconds=20, longest_step_gap_seconds=0.3)
    group = [stepping("master-0", 10, 50), stepping("worker-0", 10, 50)]
    beating = [replace(o, progress=replace(o.progress, alive_at=at(30.5))) for o in group]  # type: ignore[type-var]
    waiting = progress.check(JOB, beating, at(1), at(29), started=at(1), learned=known)
    assert not waiting.hung and waiting.check_at == at(30)
    verdict = progress.check(JOB, beating, at(1), at(30.5), started=at(1), learned=known)
    assert verdict.hung
    assert "no progress for 20s (progress deadline: learned, 5x the longest step gap seen (0.30s)" in verdict.message
    # Still learning: the start-up allowance bounds the wait, so a deadlock in the warm-up is found too.
    assert progress.check(JOB, beating, at(1), at(1000), started=at(1)).check_at == at(1810)


def test_a_stall_of_the_whole_machine_after_the_last_step_is_not_the_groups_lack_of_progress() -> None:
    known = LearnedDeadlines(progress_seconds=20, longest_step_gap_seconds=0.3)
    group = [stepping("master-0", 10, 50), stepping("worker-0", 10, 50)]

    def resumed(master: float, worker: float) -> list[ReplicaObservation]:
        steady = {"master-0": at(master), "worker-0": at(worker)}
        return [
            replace(o, progress=replace(o.progress, alive_at=at(41), beating_since=steady[str(o.replica)]))  # type: ignore[type-var]
            for o in group
        ]

    # Everything stopped from second 11 to 35 (a paused VM): worker-0 beat again at 35, master-0 at 36.
    assert not progress.check(JOB, resumed(36, 35), at(1), at(41), started=at(1), learned=known).hung
    assert not progress.check(JOB, resumed(36, 35), at(1), at(54.9), started=at(1), learned=known).hung  # from 35
    assert progress.check(JOB, resumed(36, 35), at(1), at(55), started=at(1), learned=known).hung  # still stuck
    # One process's own stall (its beating thread starved) does not move the deadline: a deadlock is found.
    assert progress.check(JOB, resumed(36, 2), at(1), at(41), started=at(1), learned=known).hung


def test_a_phase_in_progress_is_judged_by_its_own_allowance_not_the_step_deadline() -> None:
    known = LearnedDeadlines(progress_seconds=20, longest_step_gap_seconds=0.3)
    saving = stepping("master-0", 10, 50, section="checkpoint-save", section_since=at(11))
    waiting = [saving, stepping("worker-0", 10, 50)]
    beat = [replace(o, progress=replace(o.progress, alive_at=at(305))) for o in waiting]  # type: ignore[type-var]
    verdict = progress.check(JOB, beat, at(1), at(305), started=at(1), learned=known)
    assert not verdict.hung and verdict.check_at == at(311)  # the save began at 11 s; 300 s allowance
    assert progress.check(JOB, beat, at(1), at(312), started=at(1), learned=known).hung


def test_a_script_that_never_reported_is_not_judged_but_one_known_to_report_is_after_a_restart() -> None:
    silent = [running("master-0"), running("worker-0")]
    assert progress.check(JOB, silent, at(1), at(10_000), started=at(1)).check_at is None
    known = LearnedDeadlines(progress_seconds=20, longest_step_gap_seconds=0.3)
    verdict = progress.check(JOB, silent, at(1), at(1802), started=at(1), learned=known)
    assert verdict.hung and "start-up allowance" in verdict.message


def test_after_a_membership_change_start_up_lasts_until_every_member_has_stepped() -> None:
    # An elastic group regrouped at 10 s (a joiner): the survivor still steps in the old group at 12 s, then its
    # agent starts every worker cold again. Its step must not end the start-up: the joiner has not stepped.
    known = LearnedDeadlines(progress_seconds=20, longest_step_gap_seconds=0.3)
    elastic = make_job("e").workers(2).elastic(minReplicas=1, maxReplicas=2).build()
    group = [stepping("worker-0", 12, 40), running("worker-1")]
    waiting = progress.check(elastic, group, at(10), at(40), started=at(10), learned=known, regrouped=True)
    assert not waiting.hung  # the start-up allowance, from the regroup (1,800 s) bounds the wait
    # It looks again when the silence rules, off while the group forms again, apply once more.
    assert waiting.check_at == at(10 + progress.REFORM_ALLOWANCE)
    # Without the regroup, the same silence is a hang: the survivor's step ended the start-up.
    assert progress.check(elastic, group, at(10), at(40), started=at(10), learned=known).hung
    # Once every member stepped in the new group, the learned deadline holds again.
    trained = [stepping("worker-0", 30, 3), stepping("worker-1", 30, 3)]
    assert progress.check(elastic, trained, at(10), at(51), started=at(10), learned=known, regrouped=True).hung


def test_a_step_reported_just_after_a_membership_changes_stamp_is_still_the_old_groups() -> None:
    # Seen on the real nodes: a Worker lost with its node, the change decided at 21.6 s and stamped 21 s (whole
    # seconds); the survivors' last step before their collective blocked arrived at 21.3 s, then nothing while
    # their agents formed the group again. That step must not end the start-up (no hang at 41.5 s).
    known = LearnedDeadlines(progress_seconds=20, longest_step_gap_seconds=0.2)
    elastic = make_job("e").workers(3).elastic(minReplicas=2, maxReplicas=3).build()
    survivors = [stepping("worker-0", 21.3, 218), stepping("worker-2", 21.3, 218)]
    reforming = progress.check(elastic, survivors, at(21), at(41.5), started=at(21), learned=known, regrouped=True)
    assert not reforming.hung
    # A step well after the change is the new group's: the learned deadline holds again from it.
    trained = [stepping("worker-0", 30, 201), stepping("worker-2", 30, 201)]
    assert progress.check(elastic, trained, at(21), at(50.5), started=at(21), learned=known, regrouped=True).hung


def _pass(job: object, observed: list[ReplicaObservation], now: datetime) -> tuple[object, Plan]:
    result = plan(job, Observed(observed), Platform(), now)  # type: ignore[arg-type]
    return job.model_copy(update={"status": result.status}), result  # type: ignore[attr-defined]


def test_the_planner_keeps_what_it_learned_in_the_status_and_get_shows_it() -> None:
    job, _ = _pass(JOB, [], at(0))
    job, _ = _pass(job, [stepping("master-0", 5, 20, gap=0.5), stepping("worker-0", 5, 20, gap=5.2)], at(6))
    assert job.status.learned_deadlines == LearnedDeadlines(progress_seconds=26, longest_step_gap_seconds=5.2)  # type: ignore[attr-defined]
    wire = job.model_dump(by_alias=True, exclude_none=True, mode="json")  # type: ignore[attr-defined]
    assert wire["status"]["learnedDeadlines"] == {
        "progressSeconds": 26,
        "longestStepGapSeconds": 5.2,
        "sectionSeconds": {},
    }
    shown = summary(wire)
    assert "progress 26s (learned, 5x the longest step gap seen (5.20s) or more)" in shown
    assert "other phases 5m (default)" in shown


def test_a_progress_deadline_of_zero_turns_it_off_even_when_learned() -> None:
    off = make_job("off").master().workers(1).annotate(**{"torchjob.io/progress-deadline-seconds": "0"}).build()
    known = LearnedDeadlines(progress_seconds=20, longest_step_gap_seconds=0.3)
    group = [stepping("master-0", 10, 50), stepping("worker-0", 10, 50)]
    beating = [replace(o, progress=replace(o.progress, alive_at=at(5000))) for o in group]  # type: ignore[type-var]
    verdict = progress.check(off, beating, at(1), at(5000), started=at(1), learned=known)
    # Only the liveness deadline is left to look again for: when a process beating now would have been silent.
    assert not verdict.hung and verdict.check_at == at(5000 + 10 + progress.SILENCE_CHECK_MARGIN)
    assert progress.check(JOB, beating, at(1), at(5000), started=at(1), learned=known).hung  # the same, on
    wire = off.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert "progress off (torchjob.io/progress-deadline-seconds)" in summary(wire)


def test_a_group_whose_every_process_said_it_is_exiting_has_finished_not_hung() -> None:
    """Both ranks stepped their last step and exited (their last reports say so) while their Pods still look
    Running (a loaded node's kubelet reports the exits late): the progress deadline does not judge them. While
    one of them still runs without stepping, it does."""
    known = LearnedDeadlines(progress_seconds=20, longest_step_gap_seconds=0.1)
    done = [stepping("master-0", 10, 60, exiting=True), stepping("worker-0", 10, 60, exiting=True)]
    assert not progress.check(JOB, done, at(1), at(100), started=at(1), learned=known).hung
    lingering = [stepping("master-0", 10, 60), stepping("worker-0", 10, 60, exiting=True)]
    verdict = progress.check(JOB, lingering, at(1), at(30.5), started=at(1), learned=known)
    assert verdict.hung and "master-0, worker-0 stopped at step 60" in verdict.message, verdict.message
