"""A member of an in-place group that fell silent is confirmed in seconds by two witnesses: every other member
says it waits in the group's current generation, and the accused has missed its own announcements for at least
1.5 s once it has trained a step in the group as it is, 3 s while it joins or re-forms it (longer for a member once
heard late). One member's word, a slow or late member, or a whole group gone
quiet never gets a healthy member replaced."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from torchjob.core.observed import ReplicaObservation, SilentNode
from torchjob.core.policies import progress, silent_member
from torchjob.core.reported import MemberAnnouncement
from torchjob.testing import make_job, running
from torchjob.train.channel import LongestGap

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
JOB = make_job("j").master().workers(2).build()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def member(name: str, heard: float, waiting_in: int | None = None, every: float = 0.2) -> ReplicaObservation:
    said = MemberAnnouncement(attempt=0, heard_at=at(heard), every=every, waiting_in=waiting_in)
    return replace(running(name), repairable=True, member=said)


def test_the_one_member_the_others_wait_for_is_named_once_its_silence_is_confirmed() -> None:
    group = [member("master-0", 11.4, waiting_in=2), member("worker-0", 11.45, waiting_in=2), member("worker-1", 10.2)]
    # 3 missed announcements of 0.2 s would be 0.6 s: the floor, 3 s, is what counts.
    assert silent_member.find(group, 2, at(13.1)) == (None, at(13.2))
    found, _ = silent_member.find(group, 2, at(13.25))
    assert found is not None and str(found.replica) == "worker-1"
    verdict = progress.check(JOB, group, at(1), at(13.25), started=at(1), generation=2)
    assert verdict.hung and verdict.culprit is not None and str(verdict.culprit.replica) == "worker-1"
    assert verdict.message.startswith(
        "Hung: worker-1 fell silent while every other member waits for it in generation 2"
    )
    assert verdict.message.endswith("worker-1 stopped responding, the others wait for it")
    # Before it is confirmed, the planner is told when to look again.
    assert progress.check(JOB, group, at(1), at(13.1), started=at(1), generation=2).check_at == at(13.2)


def test_a_member_that_has_trained_in_the_group_is_confirmed_sooner_than_one_still_joining_it() -> None:
    # A spare just promoted, or a group re-forming, is busy joining (state received, a new DDP): its silence
    # under load says less than that of a member that has trained a step in the group as it is.
    others = [member("master-0", 11.4, waiting_in=2), member("worker-0", 11.45, waiting_in=2)]
    settled = replace(member("worker-1", 10.2), member=MemberAnnouncement(0, at(10.2), every=0.2, settled=True))
    assert silent_member.find([*others, settled], 2, at(11.6)) == (None, at(11.7))  # 1.5 s
    found, _ = silent_member.find([*others, settled], 2, at(11.75))
    assert found is not None and str(found.replica) == "worker-1"
    joining = member("worker-1", 10.2)
    assert silent_member.find([*others, joining], 2, at(11.75)) == (None, at(13.2))  # 3 s


def test_a_slow_member_a_lone_claim_an_old_generation_or_a_silent_group_single_nobody_out() -> None:
    slow = [member("master-0", 11, waiting_in=2), member("worker-0", 11, waiting_in=2), member("worker-1", 10.95)]
    assert silent_member.find(slow, 2, at(11)) == (None, at(11.55))  # a first look at its node, 3 missed
    assert silent_member.find(slow, 2, at(11.6)) == (None, at(13.95))  # it still announces: it is only slow
    lone = [member("master-0", 11, waiting_in=2), member("worker-0", 10), member("worker-1", 10)]
    assert silent_member.find(lone, 2, at(11)) == (None, None)  # one member's word accuses nobody
    old = [member("master-0", 11, waiting_in=1), member("worker-0", 11, waiting_in=1), member("worker-1", 10)]
    assert silent_member.find(old, 2, at(11)) == (None, None)  # waiting in a generation that is gone
    everyone = [member("master-0", 5, waiting_in=2), member("worker-0", 5, waiting_in=2), member("worker-1", 5)]
    assert silent_member.find(everyone, 2, at(11)) == (None, None)  # nobody heard: this controller stalled
    unannounced = [replace(o, member=None) for o in slow]
    assert silent_member.find(unannounced, 2, at(11)) == (None, None)  # not an in-place group


def test_a_member_once_heard_late_may_be_silent_twice_as_long_before_it_counts() -> None:
    first = MemberAnnouncement(attempt=0, heard_at=at(10), every=0.15)
    late = silent_member.with_longest_gap(first, MemberAnnouncement(attempt=0, heard_at=at(12), every=0.15))
    on_time = silent_member.with_longest_gap(late, MemberAnnouncement(attempt=0, heard_at=at(12.15), every=0.15))
    assert (late.longest_gap, on_time.longest_gap) == (2.0, 2.0)  # the longest gap of the attempt is kept
    # A new attempt starts afresh.
    next_attempt = MemberAnnouncement(attempt=1, heard_at=at(12), every=0.15)
    assert silent_member.with_longest_gap(on_time, next_attempt).longest_gap == 0
    others = [member("master-0", 13.6, waiting_in=2), member("worker-0", 13.6, waiting_in=2)]
    group = [*others, replace(running("worker-1"), repairable=True, member=on_time)]
    assert silent_member.find(group, 2, at(13.6)) == (None, at(16.15))  # 2 × 2 s, not 3 s
    stalled = replace(on_time, longest_gap=30.0)  # never longer than the liveness deadline's 10 s
    assert silent_member.find([*others, replace(group[2], member=stalled)], 2, at(13.6)) == (None, at(22.15))


def test_announcements_are_read_strictly() -> None:
    heard = at(1)
    said = MemberAnnouncement.from_message({"attempt": 1, "every": 0.2, "waiting": 3}, heard)
    assert said == MemberAnnouncement(1, heard, 0.2, 3)
    assert MemberAnnouncement.from_message({"attempt": 0}, heard) == MemberAnnouncement(0, heard)
    assert MemberAnnouncement.from_message({"attempt": 0, "settled": True}, heard) == MemberAnnouncement(
        0, heard, settled=True
    )
    loosely = MemberAnnouncement.from_message({"attempt": 0, "settled": "yes"}, heard)
    assert loosely is not None and not loosely.settled
    first = MemberAnnouncement.from_message({"attempt": 0, "waiting": 0}, heard)  # the first generation
    assert first is not None and first.waiting_in == 0
    for bad in ({"attempt": True}, {"attempt": -1}, {"every": 1}, [], None, {"attempt": "0"}):
        assert MemberAnnouncement.from_message(bad, heard) is None
    odd = MemberAnnouncement.from_message({"attempt": 0, "every": -1, "waiting": "x"}, heard)
    assert odd == MemberAnnouncement(0, heard)


def test_a_member_says_how_late_it_has_been_where_no_hearer_keeps_its_gaps() -> None:
    """Locally the controller reads each member's announcement file afresh: the member's own count of its
    longest gap (``channel.LongestGap``) lengthens its allowance as a hearer's would; nonsense counts as none."""
    said = MemberAnnouncement.from_message({"attempt": 0, "every": 0.2, "longest_gap": 1.8}, at(10))
    assert said is not None and said.longest_gap == 1.8
    others = [member("master-0", 11.6, waiting_in=2), member("worker-0", 11.6, waiting_in=2)]
    group = [*others, replace(running("worker-1"), repairable=True, member=said)]
    assert silent_member.find(group, 2, at(11.6)) == (None, at(13.6))  # 2 × 1.8 s, not 3 s
    for nonsense in (-1, "2", float("nan"), True):
        found = MemberAnnouncement.from_message({"attempt": 0, "longest_gap": nonsense}, at(10))
        assert found is not None and found.longest_gap == 0.0
    # A spare says it waits every 5 s, with no ``every``: promoted, its gaps as a spare are not held against it.
    spare = MemberAnnouncement(attempt=0, heard_at=at(5), longest_gap=5.0)
    promoted = silent_member.with_longest_gap(spare, MemberAnnouncement(attempt=0, heard_at=at(10), every=0.15))
    assert promoted.longest_gap == 0.0
    gap = LongestGap()
    assert gap.said_now() == 0.0  # nothing to measure before the second announcement
    time.sleep(0.05)
    assert gap.said_now() >= 0.05


def test_after_a_stall_of_the_machine_the_last_member_to_resume_is_not_taken_for_silent_since_before_it() -> None:
    """Every member stopped at second 10.2 (a paused VM). master-0 and worker-0 resumed at 20 and wait in
    generation 2 for worker-1, which has not resumed yet: they witness its silence from 20, not from 10.2."""

    def resumed(name: str, heard: float) -> ReplicaObservation:
        said = MemberAnnouncement(0, at(heard), every=0.2, waiting_in=2, steady_since=at(20))
        return replace(running(name), repairable=True, member=said)

    group = [resumed("master-0", 20.4), resumed("worker-0", 20.45), member("worker-1", 10.2)]
    assert silent_member.find(group, 2, at(20.5)) == (None, at(20.6))  # first look: 3 announcements after 20
    assert silent_member.find(group, 2, at(22.9)) == (None, at(23))  # the floor, 3 s, counted from 20
    # worker-1 never resumes while the others announce on: named once they have witnessed its silence.
    later_on = [resumed("master-0", 23.1), resumed("worker-0", 23.1), group[2]]
    found, _ = silent_member.find(later_on, 2, at(23.1))
    assert found is not None and str(found.replica) == "worker-1"
    # Members that do not say how long they announced steadily (an older torchjob) are judged as before.
    unsaid = [replace(o, member=replace(o.member, steady_since=None)) for o in group[:2]]  # type: ignore[type-var]
    found, _ = silent_member.find([*unsaid, group[2]], 2, at(20.5))
    assert found is not None and str(found.replica) == "worker-1"
    said = MemberAnnouncement.from_message({"attempt": 0, "steady_for": 2.5}, at(20))
    assert said is not None and said.steady_since == at(17.5)
    gap = LongestGap()
    gap.said_now()
    time.sleep(0.05)
    gap.said_now()
    assert 0.05 <= gap.steady_for < 1.0  # announced steadily since its first announcement


def test_a_member_whose_node_the_operator_cannot_reach_is_named_after_three_missed_announcements() -> None:
    """A vanished node: the operator's own probe is a third witness, so the floor for a member late on a loaded
    machine (3 s) does not apply. A member whose node answers still waits for the floor."""
    group = [member("master-0", 11.4, waiting_in=2), member("worker-0", 11.45, waiting_in=2), member("worker-1", 10.9)]
    # Its node not looked at yet: the first look comes after three missed announcements (0.6 s), so that the
    # backend probes the node of a member silent that long; the floor comes after.
    assert silent_member.find(group, 2, at(11.3)) == (None, at(11.5))
    assert silent_member.find(group, 2, at(11.55)) == (None, at(13.9))
    gone = SilentNode("node-b", at(10.9), unreachable=True)
    group[2] = replace(group[2], silent_node=gone)
    assert silent_member.find(group, 2, at(11.3)) == (None, at(11.5))
    found, _ = silent_member.find(group, 2, at(11.55))
    assert found is not None and str(found.replica) == "worker-1"
    # A node whose kubelet only missed a Lease renewal (its host answers) is no such witness.
    group[2] = replace(group[2], silent_node=SilentNode("node-b", at(10.9), unreachable=False))
    assert silent_member.find(group, 2, at(11.55)) == (None, at(13.9))


def test_a_member_that_missed_two_announcements_looks_quiet_for_its_node_to_be_probed() -> None:
    said = MemberAnnouncement(attempt=0, heard_at=at(10), every=0.15)
    assert not silent_member.looks_quiet(said, at(10.25))
    assert silent_member.looks_quiet(said, at(10.35))
    assert not silent_member.looks_quiet(replace(said, every=None), at(20))  # a spare: it never runs a step
    assert not silent_member.looks_quiet(None, at(20))
