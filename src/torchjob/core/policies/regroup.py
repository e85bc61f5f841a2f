"""Elastic groups under in-place repair: the group shrinks at once when a member is lost, and grows when a
warm spare is ready to take an empty place, while the survivors keep their processes.

An elastic job whose script trains under ``torchjob.train.in_place`` (it names ``torchjob.io/spares``; see
``envs.in_place``) is not a set of torchrun agents: its replicas run the script directly and meet at the
store torchjob hosts, like a fixed group under in-place repair. Its membership is decided here:

- a Worker lost to a retryable failure leaves the group, and so does a live Worker above the target count
  (after ``torchjob scale``), as long as minReplicas Workers remain and every remaining member can be
  repaired around (it announced the in-place loop);
- a Worker being evicted (its Pod deleted under a DisruptionTarget, as ``kubectl drain`` does) leaves the group
  at its next step while it still runs (it holds the notice: ``torchjob.train.eviction``), on the same terms;
- an empty place of the target group (a lost or a new Worker's) goes to a ready spare of the attempt, the
  lowest index first; the spares to start are the idle ones the annotation asks for plus one per empty place;
- whenever members leave or join, the group is told its next membership (the planner's ``ReformGroup``): after
  a loss the survivors re-form at once, otherwise at their next step (they agree on it with one collective
  per step). A Worker scaled away is stopped with a grace period; it trains on, and leaves at that next step with
  exit code 0, so that no member's step fails for it.

Otherwise, e.g. fewer than minReplicas Workers would remain, or a member has not yet announced the loop
(the group is still starting), ``decide`` returns None and a loss is an ordinary failure: the group restarts.
Leaving and joining are counted in ``status.membershipChanges``, never as restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from torchjob.api.types import PyTorchJob, ReplicaType
from torchjob.core.actions import Action, DeleteReplica, Event, RepairReplica
from torchjob.core.envs import in_place
from torchjob.core.observed import Phase, ReplicaObservation, SpareObservation, lost_with_node
from torchjob.core.policies import repair
from torchjob.core.policies.elastic import target_workers
from torchjob.core.policies.restart import is_retryable, restart_policy_of
from torchjob.core.replicas import expected_replicas


def applies(job: PyTorchJob, platform_repairs_in_place: bool) -> bool:
    """Whether the job's membership is decided here: an elastic job under in-place repair on a platform that
    can repair in place."""
    return platform_repairs_in_place and job.spec.elastic_policy is not None and in_place(job)


@dataclass(frozen=True)
class Regroup:
    """What one pass changes in a running elastic group under in-place repair."""

    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    leaving: list[ReplicaObservation] = field(default_factory=list)
    joining: int = 0
    empty_places: int = 0  # places of the target group no spare fills yet: a spare is started for each
    # The group's next membership when it changes (members in rank order, spares promoted into it).
    members: tuple[str, ...] | None = None
    promoted: tuple[tuple[str, str], ...] = ()
    # Whether members leave without agreeing to it (lost, hung): not one scaled away or evicted (it trains on, and
    # leaves at the group's next step, which no member fails), nor a spare joining.
    lost: bool = False


def decide(
    job: PyTorchJob,
    attempt: int,
    current: list[ReplicaObservation],
    spares: list[SpareObservation],
    hung: ReplicaObservation | None = None,
    members_now: Sequence[str] | None = None,
) -> Regroup | None:
    """The group's change for this pass (nothing to change: an empty one); None when a loss cannot be
    absorbed in place, so that it fails the attempt like any other. ``hung``: the one member of a hung group
    that stopped responding (``policies/progress``); it is stopped at once and leaves like a lost one.
    ``members_now``: the group's current membership, None before the attempt's first change (an evicted member
    leaves it once)."""
    live = [o for o in current if not o.stopping]
    evicted = [o for o in current if _evicted(o) and (members_now is None or str(o.replica) in members_now)]
    lost = [o for o in live if o.phase is Phase.FAILED]
    if lost and not all(_can_leave(job, o) for o in lost):
        return None
    if hung is not None:
        if hung.replica.replica_type is not ReplicaType.WORKER or not hung.repairable or lost:
            return None
        lost = [hung]
    staying = [o for o in live if o.phase.live and o not in lost]
    target = target_workers(job)
    surplus = [o for o in staying if o.replica.replica_type is ReplicaType.WORKER and o.replica.index >= target]
    staying = [o for o in staying if o not in surplus]
    minimum = job.spec.elastic_policy.min_replicas if job.spec.elastic_policy else None
    workers_left = sum(o.replica.replica_type is ReplicaType.WORKER for o in staying)
    may_shrink = all(o.repairable for o in staying) and workers_left >= (minimum or 1)
    if (lost or surplus) and not may_shrink:
        return None
    if not may_shrink:
        evicted = []  # it stays a member until it goes: its loss is then dealt with like any other
    present = {o.replica for o in staying}
    finished = {o.replica for o in live if o.phase is Phase.SUCCEEDED}  # training is over: no place to fill
    empty = [r for r in expected_replicas(job) if r not in present and r not in finished]
    if not staying or any(r.replica_type is not ReplicaType.WORKER for r in empty):
        return Regroup() if not lost else None  # not started yet, or a Master lost: no group to keep
    ready = sorted(s.name for s in spares if s.attempt == attempt and s.ready and not s.stopping)
    if finished or not all(o.repairable for o in staying):
        ready = []  # still starting, or ending: a spare joins a group that trains
    fills = list(zip(empty, ready, strict=False))
    members = (
        repair.members_in_rank_order(job, [*present, *(r for r, _ in fills)])
        if lost or surplus or fills or evicted
        else None
    )
    change = Regroup(
        leaving=lost + surplus + evicted,
        joining=len(fills),
        empty_places=len(empty) - len(fills),
        members=members,
        promoted=tuple((spare, str(replica)) for replica, spare in fills),
        lost=bool(lost),
    )
    for o in lost:
        what = f"{o.replica} stopped responding (hung)" if o is hung else o.describe()
        message = f"{what}; the group carries on in place with {workers_left} Worker(s)"
        change.events.append(Event("Warning", "MemberLost", f"{message} (minReplicas {minimum})"))
        reason = "a hung member of the elastic group" if o is hung else "a lost member of the elastic group"
        change.actions.append(DeleteReplica(o.replica, o.attempt, reason, at_once=o is hung, force=lost_with_node(o)))
    for o in evicted:  # the platform removes its Pod: nothing to delete
        message = f"{o.replica} is being evicted: it leaves the group at its next step, which carries on in place"
        change.events.append(Event("Normal", "MemberLeaving", f"{message} with {workers_left} Worker(s)"))
    for o in surplus:
        change.events.append(Event("Normal", "ScaledDown", f"{o.replica} leaves: scaled to {target} Worker(s)"))
        change.actions.append(DeleteReplica(o.replica, o.attempt, f"scaled down to {target} Worker(s)"))
    for replica, spare in fills:
        change.events.append(Event("Normal", "MemberAdded", f"{spare} joins the running group as {replica}"))
        change.actions.append(RepairReplica(replica, attempt, spare))
    return change


def _evicted(observation: ReplicaObservation) -> bool:
    """A running Worker whose Pod the platform is deleting on a disruption (a drain, a preemption)."""
    return (
        observation.stopping
        and observation.phase is Phase.RUNNING
        and observation.disrupted_at is not None
        and observation.replica.replica_type is ReplicaType.WORKER
        and observation.repairable
    )


def _can_leave(job: PyTorchJob, lost: ReplicaObservation) -> bool:
    """A failed member the group can do without: a Worker that trained in place (``repair.trained_in_place``; the
    staying members' announcements, required by ``decide``, speak for one never heard) and failed retryably."""
    retryable = is_retryable(restart_policy_of(job, lost), lost)
    return lost.replica.replica_type is ReplicaType.WORKER and repair.trained_in_place(lost) and retryable
