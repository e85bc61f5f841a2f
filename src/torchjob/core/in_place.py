"""The planner's in-place decisions (``core/planning.py``), as functions of the pass (``pass_state.py``): a
lost or hung member's place given to a warm spare, an elastic group that shrinks and grows around its running
members (or, outside in-place repair, lets a lost Worker go), and a repair given up when it does not complete.
Each records what it decided in the pass (actions, events, the status); the planner calls them and decides what
happens when they decline. The policies themselves are ``policies/repair.py``, ``policies/regroup.py`` and
``policies/elastic.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from torchjob.core import attempts, conditions
from torchjob.core.actions import Cause, Event, ReformGroup, RepairReplica
from torchjob.core.envs import spare_wait
from torchjob.core.observed import ReplicaObservation, SpareObservation, lost_with_node
from torchjob.core.pass_state import PassState
from torchjob.core.policies import backoff, elastic, node_loss, regroup, repair
from torchjob.core.policies.regroup import Regroup
from torchjob.core.times import timestamp

# How long after a hung member's node loss is due the hang waits for it to be declared (``awaits_node_loss``), and
# when the pass looks: just after it is due (a pass at the very instant may find the silence not yet past it).
NODE_LOSS_GRACE = timedelta(seconds=1)
NODE_LOSS_LOOK = timedelta(seconds=0.1)


def spares_of(state: PassState) -> list[SpareObservation]:
    """The warm spares a repair may use: none where the platform cannot repair in place."""
    return state.helpers.spares if state.helpers.in_place else []


def repaired(state: PassState, decisions: list[repair.Repair], counted: bool, handover: bool = False) -> bool:
    """Replace the lost members with warm spares while the others carry on, where that is possible
    (``handover``: members on notice of eviction, which still run and leave the group by themselves)."""
    if not decisions:
        return False
    if counted and not _room_for(state, len(decisions)):
        return False  # a crash loop: the group restart path ends the job at the backoff limit
    current = state.current_replicas()
    others = len(current) - len(decisions)
    for decision in decisions:
        lost = decision.lost
        replica, attempt, force = lost.replica, state.status.attempt, lost_with_node(lost)
        state.actions.append(RepairReplica(replica, attempt, decision.spare, force, handover))
        state.status.repairs += 1
        message = decision.describe(others, state.status.repairs)
        kind, reason = ("Normal", "HandedOver") if handover else ("Warning", "Repaired")
        state.events.append(Event(kind, reason, message, decision.cause))
    # The group keeps its places: its live members, and the lost ones now held by the spares.
    places = [o.replica for o in current if o.phase.live and not o.stopping]
    members = repair.members_in_rank_order(state.job, [*places, *(d.lost.replica for d in decisions)])
    reform(state, members, [(d.spare, str(d.lost.replica)) for d in decisions], lost=not handover)
    attempts.note_repair(state.status, state.now)
    attempts.note_spare_awaited(state.status, None)
    return True


def _room_for(state: PassState, repairs: int) -> bool:
    """Whether ``repairs`` more repairs stay within backoffLimit, which repairs and restarts share."""
    return backoff.may_restart(state.job, state.status.restart_count + state.status.repairs + repairs - 1)


def awaits_spare(state: PassState, cause: Cause, counted: bool) -> bool:
    """Whether the group waits for a spare still warming to take a lost member's place, rather than restart
    (``repair.spare_awaited_until``); says so once when the wait begins. The pass wakes when it ends."""
    current, attempt = state.current_replicas(), state.status.attempt
    if counted and not _room_for(state, len(repair.failed_replicas(current))):
        return False  # the repairs would pass backoffLimit: the group restart path ends the job
    since = attempts.spare_awaited_since(state.status)
    until = repair.spare_awaited_until(state.job, attempt, current, spares_of(state), since, state.now)
    if until is None:
        return False
    if since is None:
        attempts.note_spare_awaited(state.status, state.now)
        waited = f"{spare_wait(state.job):g}s"
        message = f"{cause.text}; no spare is ready to take its place: the group waits for one, up to {waited}"
        state.events.append(Event("Warning", "SpareAwaited", message, cause))
    state.wake_at(until)
    return True


def awaits_node_loss(state: PassState, culprit: ReplicaObservation) -> bool:
    """Whether a hung member that no ready spare can replace is left to the verdict of its node's loss, due within
    a second or two (``node_loss.lost_by``: its node stopped reporting and does not answer). A hang restarts the
    group at once, counted; a member lost with its node is waited for (``awaits_spare``: the spare that went with
    it is no spare, and a new one warms elsewhere), and a restart for it is the platform's, not counted. The pass
    wakes when it is due; past it (the loss never declared), the hang stands."""
    due = node_loss.lost_by(state.job, culprit) if state.helpers.in_place else None
    if due is None or state.now >= due + NODE_LOSS_GRACE:
        return False
    state.wake_at(due + NODE_LOSS_LOOK if state.now < due + NODE_LOSS_LOOK else due + NODE_LOSS_GRACE)
    return True


def spare_given_up(state: PassState, cause: Cause) -> Cause:
    """``cause`` of a restart, saying so where the group waited for a spare in vain."""
    since = attempts.spare_awaited_since(state.status)
    if since is None:
        return cause
    waited = (state.now - since).total_seconds()
    return replace(cause, text=f"{cause.text} (no spare was ready for its place; waited {waited:.0f}s)")


def handed_over(state: PassState, current: list[ReplicaObservation]) -> bool:
    """Give the places of members on notice of eviction to warm spares before they go (``repair.decide_handover``)."""
    if not state.helpers.in_place:
        return False
    decisions = repair.decide_handover(state.job, state.status.attempt, current, spares_of(state))
    return repaired(state, decisions, counted=False, handover=True)


def membership_changes(state: PassState, current: list[ReplicaObservation]) -> list[ReplicaObservation]:
    """Elastic jobs: let lost and surplus Workers go without ending the attempt (around running members, in
    place, where the group repairs in place; else with a replacement started later). Returns the rest."""
    if state.helpers.regroups:
        return regroup_members(state, current)
    change = elastic.membership_change(state.job, current, state.now)
    if not change.leaving:
        return current
    state.actions += change.actions
    state.events += change.events
    for replica, due in change.replacements.items():
        state.status.replacement_due[replica] = timestamp(due)
        state.wake_at(due)
    state.status.membership_changes += len(change.leaving)
    attempts.note_regroup(state.status, state.now)  # the launcher restarts every worker: a start-up again
    return [o for o in current if o not in change.leaving]


def regroup_members(state: PassState, current: list[ReplicaObservation]) -> list[ReplicaObservation]:
    """An elastic group under in-place repair shrinks and grows around its running members. Returns the
    members that stay (all of them when a loss cannot be absorbed: it fails the attempt, later)."""
    change = regrouped(state, current)
    return current if change is None else [o for o in current if o not in change.leaving]


def regrouped(
    state: PassState, current: list[ReplicaObservation], hung: ReplicaObservation | None = None
) -> Regroup | None:
    """Apply ``policies/regroup``'s decision for the group (around a ``hung`` member, if named); None when
    it has none."""
    group = state.status.membership
    members = group.members if group is not None and group.attempt == state.status.attempt else None
    change = regroup.decide(state.job, state.status.attempt, current, spares_of(state), hung, members)
    if change is None:
        return None
    state.actions += change.actions
    state.events += change.events
    if change.members is not None:
        reform(state, change.members, change.promoted, change.lost)
    state.status.membership_changes += len(change.leaving) + change.joining
    state.empty_places = change.empty_places
    if change.leaving or change.joining:
        attempts.note_repair(state.status, state.now)  # the group re-forms: that is progress, and has a deadline
    return change


def reform(state: PassState, members: Sequence[str], promoted: Sequence[tuple[str, str]], lost: bool) -> None:
    """Tell the group its next membership, and keep it in the status (the same for any operator); ``lost``:
    members were removed without agreeing to it (``repair.next_membership``)."""
    membership = repair.next_membership(state.status.membership, state.status.attempt, members, promoted, lost)
    state.status.membership = membership
    state.actions.append(ReformGroup(membership))


def repair_overdue(state: PassState, current: list[ReplicaObservation]) -> Cause | None:
    """Why the group must restart when its last repair in place did not complete in time; None while it may
    still complete (the pass wakes up when it is due)."""
    repaired_at = attempts.repaired_at(state.status)
    gave_up, look_again = repair.overdue(current, repaired_at, state.now)
    if gave_up is None:
        state.wake_at(look_again)
        return None
    state.events.append(Event("Warning", "RepairTimeout", gave_up))
    return Cause(gave_up, "RepairTimeout", repaired_at)


def publish_kept(state: PassState, published: tuple[int, int] | None) -> None:
    """Ask for the membership the status keeps to be published again when the backend serves another (an
    operator that restarted, or a new leader, serves none): the group must always be able to read it."""
    kept = state.status.membership
    if not state.helpers.in_place or kept is None or conditions.is_finished(state.status):
        return
    if kept.attempt == state.status.attempt and (kept.attempt, kept.generation) != published:
        state.actions.append(ReformGroup(kept))
