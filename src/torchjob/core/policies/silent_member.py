"""A member of an in-place group that went silent, found in seconds: its peers say they wait for it.

The liveness deadline (``policies/progress.py``) names a process that stops beating after 10 s, because a
beat once a second from a busy machine can be late. A group under in-place repair knows more: every member's
watching thread says it runs several times a second (``MemberAnnouncement.every``), and a member whose step
has run far past its usual time says which generation's step it waits in. When every member but one waits in
the group's current generation, and that one has not been heard for ``MISSED`` of its own announcements
while the waiting ones were (and for at least ``SETTLED_MIN_SILENCE``, or ``MIN_SILENCE`` while it joins or
re-forms the group; longer for a member once heard late), it is the one they wait for: SIGSTOPped, frozen, or
cut off with its node.

Two witnesses, so that one member's word never gets a healthy one replaced: the waiting peers (a forged or
mistaken claim of waiting changes nothing while the accused still announces), and the accused's own silence. A
member that is merely slow (a long step, a busy machine) still announces from its watching thread, and is
left alone; if every member falls quiet at once (this controller stalled, or the machine did), nobody is
singled out, and the longer deadlines decide. When they resume one by one after such a stall, a waiting member
witnesses the suspect's silence only from its own return (it says for how long it has announced without a
stall), so the last to resume is not taken for silent since before the stall.

A third witness shortens the wait: the accused's node, which the operator itself cannot reach (its connection
to the node's kubelet unanswered, ``backends/kubernetes/reachability.py``; a host that is up answers even when
loaded). A vanished node is then known after ``MISSED`` announcements, not ``MIN_SILENCE``: the floor exists
for a member late on a loaded machine, whose node still answers. The first look comes after ``MISSED``
announcements, so that the backend probes the node of a member silent that long (``looks_quiet``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from torchjob.core.observed import Phase, ReplicaObservation
from torchjob.core.reported import MemberAnnouncement
from torchjob.core.times import later

# Announcements a member may miss before its silence counts, and never less than a floor: a healthy member of a
# loaded machine can be late by more than three announcements. The floor is MIN_SILENCE for a member still joining
# or re-forming the group (a spare just promoted, whose gaps as a spare are not held against it, was once silent
# 1.5 s in a Pod while CI's other tests loaded the 2 cores), SETTLED_MIN_SILENCE once it has trained a step in it.
MISSED = 3
MIN_SILENCE = 3.0
SETTLED_MIN_SILENCE = 1.5
# A member once heard late by G seconds (its longest gap between announcements) may be silent LATE_FACTOR × G before
# it counts, up to MAX_SILENCE (the liveness deadline's default: a silence that long is named anyway).
LATE_FACTOR = 2.0
MAX_SILENCE = 10.0
_DEFAULT_EVERY = 1.0


def find(
    current: list[ReplicaObservation], generation: int, now: datetime
) -> tuple[ReplicaObservation | None, datetime | None]:
    """The one member every other member waits for in ``generation``, once its silence is confirmed; else
    None, and when to look again (the moment the silence would be confirmed), if it may be."""
    members = [o for o in current if o.member is not None and o.phase is Phase.RUNNING and not o.stopping]
    waiting = [o for o in members if _said(o).waiting_in == generation]
    quiet = [o for o in members if _said(o).waiting_in != generation]
    if len(members) < 2 or len(quiet) != 1:
        return None, None
    suspect = _said(quiet[0])
    # Silent only while the waiting ones witnessed it: a member resumed from a stall of the machine that stopped
    # everyone counts its peer's silence from its own return, not from before the stall.
    witnessed = max([suspect.heard_at, *(s for s in (_said(o).steady_since for o in waiting) if s is not None)])
    due = later(witnessed, _allowed_for(quiet[0]))
    if now < due:
        first_look = later(witnessed, _missed(suspect))  # its node may be found gone by then
        return None, first_look if now < first_look else due
    if any((now - _said(o).heard_at).total_seconds() > _allowed(_said(o)) for o in waiting):
        return None, None  # the waiting ones are not heard either: no single member fell silent
    return quiet[0], None


def describe(suspect: ReplicaObservation, generation: int, now: datetime) -> str:
    said = _said(suspect)
    silence = (now - said.heard_at).total_seconds()
    return (
        f"Hung: {suspect.replica} fell silent while every other member waits for it in generation {generation} "
        f"(not heard for {silence:.1f}s, it said it runs every {said.every or _DEFAULT_EVERY:g}s); "
        f"{suspect.replica} stopped responding, the others wait for it"
    )


def _said(observation: ReplicaObservation) -> MemberAnnouncement:
    assert observation.member is not None
    return observation.member


def with_longest_gap(before: MemberAnnouncement | None, after: MemberAnnouncement) -> MemberAnnouncement:
    """``after`` carrying the longest gap of its member's attempt so far (``before``: what it said last), which
    lengthens the silence it is allowed (``_allowed``). Gaps after a spare's announcements (they carry no
    ``every``: a waiting spare says so every few seconds) are no member's lateness: a promoted spare starts afresh."""
    if before is None or before.attempt != after.attempt or before.every is None:
        return after
    gap = (after.heard_at - before.heard_at).total_seconds()
    return replace(after, longest_gap=max(before.longest_gap, gap, after.longest_gap))


def heard_again(before: MemberAnnouncement, after: MemberAnnouncement) -> bool:
    """Whether ``after`` ends a silence of ``before``'s member long enough that a verdict may have waited for
    it (the controller should look at the group again at once)."""
    return (after.heard_at - before.heard_at).total_seconds() > _allowed(before)


def looks_quiet(said: MemberAnnouncement | None, now: datetime) -> bool:
    """Whether a running member has missed announcements enough for its node to be looked at: two, one fewer
    than ``find``'s first look, so that the pass it wakes for finds the node probed."""
    if said is None or said.every is None:
        return False
    return (now - said.heard_at).total_seconds() > (MISSED - 1) * said.every


def _allowed_for(observation: ReplicaObservation) -> float:
    """The silence that confirms this member: ``MISSED`` announcements where the operator cannot reach its node
    (a vanished host), else ``_allowed``."""
    node = observation.silent_node
    said = _said(observation)
    return _missed(said) if node is not None and node.unreachable else _allowed(said)


def _missed(said: MemberAnnouncement) -> float:
    return MISSED * (said.every or _DEFAULT_EVERY)


def _allowed(said: MemberAnnouncement) -> float:
    floor = SETTLED_MIN_SILENCE if said.settled else MIN_SILENCE
    return max(_missed(said), floor, min(LATE_FACTOR * said.longest_gap, MAX_SILENCE))
