"""Elastic policy: which membership changes a running elastic group absorbs without a restart.

An elastic job's replicas are torchrun agents that re-form the group among themselves whenever a member
joins or leaves (``PET_NNODES=min:max``). So for a job with ``spec.elasticPolicy``:

- the Worker count is a target within [minReplicas, maxReplicas]; ``torchjob scale`` changes it. Workers
  above the target are stopped, the highest index first; missing ones are started into the running group;
- a Worker lost to a retryable failure, while at least minReplicas Workers remain, is a *membership change*,
  not a failure: the group carries on with the rest, and a replacement joins it after a delay (like the
  kubelet's first crash-loop back-off, and like a real cluster, where a lost node's replacement takes time);
- with fewer than minReplicas left, the loss is an ordinary failure of the attempt (restart policy, backoff).

The agents re-form the group when one of their workers fails, or when a newcomer waits to join. A member
killed in a live node fails its peers' collective at once (its kernel resets their connections). A member lost
with its node sends nothing: its peers wait in their collective for the group's whole timeout (30 minutes by
default), and an etcd rendezvous never even counts the newcomer as waiting (the newcomer finds the lost
member's lease expired, ends that rendezvous and opens another, which the blocked agents do not look at). So
the survivors of a member lost with its node are ordered out of the group (``LeaveGroup``): their workers
exit, and their agents form it again with who is left.

Membership changes are counted in ``status.membershipChanges``, never in ``status.restartCount``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from torchjob.api import extensions
from torchjob.api.types import PyTorchJob, ReplicaType
from torchjob.core.actions import DeleteReplica, Event, LeaveGroup
from torchjob.core.observed import Phase, PlatformReason, ReplicaObservation
from torchjob.core.policies.restart import is_retryable, restart_policy_of
from torchjob.core.replicas import ReplicaId, replica_count
from torchjob.core.times import parse_timestamp

# Seconds before a lost Worker's replacement starts, unless the annotation says otherwise.
DEFAULT_REPLACEMENT_DELAY = 10.0


def is_elastic(job: PyTorchJob) -> bool:
    return job.spec.elastic_policy is not None


def hosts_rendezvous_store(job: PyTorchJob, honor_rdzv_host: bool = True) -> bool:
    """Whether torchjob hosts the c10d rendezvous store of an elastic job itself, outside every agent.

    torchrun's c10d rendezvous keeps its state in a store one agent hosts; losing that agent ends the
    rendezvous for all (so an elastic job could not lose that member). For c10d jobs, each backend runs the
    store separately and tells the agents ``is_host=false`` — unless the job names its own ``rdzvHost`` and
    the backend can reach it (a cluster can; a laptop cannot resolve cluster names, so locally it is ignored).

    An etcd rendezvous meets at the job's own etcd. Where the platform cannot reach the cluster name it gives
    (a laptop, for an ElasticJob's ``etcd-service:2379``), the group meets at torchjob's store instead: only
    an etcd on this machine (no host, or a loopback one) is reachable there.
    """
    elastic = job.spec.elastic_policy
    if elastic is None:
        return False
    if (elastic.rdzv_backend or "c10d") == "c10d":
        return not (honor_rdzv_host and elastic.rdzv_host)
    return not honor_rdzv_host and not on_this_machine(elastic.rdzv_host)


def on_this_machine(host: str | None) -> bool:
    """Whether ``host`` names the machine itself (no host at all: the local default, 127.0.0.1)."""
    return host is None or host == "localhost" or host.startswith("127.") or host in ("::1", "0.0.0.0")


def etcd_stand_in(job: PyTorchJob) -> str | None:
    """Said where a local run meets at torchjob's store in place of the etcd the job names (None elsewhere)."""
    elastic = job.spec.elastic_policy
    if elastic is None or (elastic.rdzv_backend or "c10d") == "c10d" or not hosts_rendezvous_store(job, False):
        return None
    return (
        f"the etcd rendezvous at {elastic.rdzv_host}:{elastic.rdzv_port} names a host of the cluster, which this "
        "machine cannot reach: locally the Workers meet at a c10d store torchjob hosts instead (on a cluster they "
        "meet at that etcd)"
    )


def target_workers(job: PyTorchJob) -> int:
    """How many Workers the job should have now: the spec's count, within the elastic bounds if any."""
    return replica_count(job, ReplicaType.WORKER)


def replacement_delay(job: PyTorchJob) -> timedelta:
    value = job.annotation(extensions.REPLACEMENT_DELAY)
    return timedelta(seconds=float(value) if value else DEFAULT_REPLACEMENT_DELAY)


def _workers(current: list[ReplicaObservation]) -> list[ReplicaObservation]:
    return [o for o in current if o.replica.replica_type is ReplicaType.WORKER and not o.stopping]


def lost_members(job: PyTorchJob, current: list[ReplicaObservation]) -> list[ReplicaObservation]:
    """Workers of an elastic job that failed but that the group can do without (empty when it cannot)."""
    elastic = job.spec.elastic_policy
    if elastic is None:
        return []
    workers = _workers(current)
    lost = [o for o in workers if o.phase is Phase.FAILED and is_retryable(restart_policy_of(job, o), o)]
    remaining = [o for o in workers if o.phase.live]
    return lost if lost and len(remaining) >= (elastic.min_replicas or 1) else []


def surplus_members(job: PyTorchJob, current: list[ReplicaObservation]) -> list[ReplicaObservation]:
    """Live Workers above the target count (after a scale-down), highest index first."""
    if not is_elastic(job):
        return []
    target = target_workers(job)
    extra = [o for o in _workers(current) if o.phase.live and o.replica.index >= target]
    return sorted(extra, key=lambda o: o.replica.index, reverse=True)


def remaining_workers(current: list[ReplicaObservation], leaving: list[ReplicaObservation]) -> int:
    gone = {o.replica for o in leaving}
    return sum(o.phase.live and o.replica not in gone for o in _workers(current))


@dataclass(frozen=True)
class MembershipChange:
    """What a pass does about Workers that leave a running elastic group without ending the attempt."""

    leaving: list[ReplicaObservation] = field(default_factory=list)
    actions: list[DeleteReplica | LeaveGroup] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    replacements: dict[str, datetime] = field(default_factory=dict)  # a lost Worker → when its replacement joins


def membership_change(job: PyTorchJob, current: list[ReplicaObservation], now: datetime) -> MembershipChange:
    """Lost Workers (the group can do without them) and surplus ones (above the target) leave the group."""
    lost = lost_members(job, current)
    surplus = surplus_members(job, [o for o in current if o not in lost])
    leaving = lost + surplus
    if not leaving:
        return MembershipChange()
    change = MembershipChange(leaving=leaving)
    remaining = remaining_workers(current, leaving)
    minimum = job.spec.elastic_policy.min_replicas if job.spec.elastic_policy else None
    delay = replacement_delay(job)
    for o in lost:
        change.replacements[str(o.replica)] = now + delay
        told = " (its peers are told to leave the group it took with it)" if _silent(o) else ""
        message = (
            f"{o.describe()}; the group carries on with {remaining} Worker(s) (minReplicas {minimum}){told}, "
            f"and a replacement joins in {delay.total_seconds():g}s"
        )
        change.events.append(Event("Warning", "MemberLost", message))
        change.actions.append(DeleteReplica(o.replica, o.attempt, "a lost member of the elastic group"))
    change.actions.extend(_orders_to_leave(lost, [o for o in _workers(current) if o.phase.live and o not in leaving]))
    target = target_workers(job)
    for o in surplus:
        change.events.append(Event("Normal", "ScaledDown", f"{o.replica} leaves: scaled to {target} Worker(s)"))
        change.actions.append(DeleteReplica(o.replica, o.attempt, f"scaled down to {target} Worker(s)"))
    return change


def _orders_to_leave(lost: list[ReplicaObservation], survivors: list[ReplicaObservation]) -> list[LeaveGroup]:
    """The survivors' orders to leave a group whose members were lost with their node (see the module's
    docstring); none where every loss reset its peers' connections."""
    silent = [o for o in lost if _silent(o)]
    if not silent:
        return []
    names = ", ".join(str(o.replica) for o in silent)
    why = f"{names} was lost with its node, and no reset reaches this group's collectives"
    return [LeaveGroup(o.replica, o.attempt, why) for o in survivors]


def _silent(lost: ReplicaObservation) -> bool:
    """Whether ``lost`` went without a word to its peers (no reset reaches them): lost with its node."""
    return lost.reason is PlatformReason.NODE_LOST


def replacement_waits_until(replacement_due: dict[str, str], replica: ReplicaId, now: datetime) -> datetime | None:
    """When a lost member's replacement may start, while it must still wait (None: it may start now)."""
    recorded = replacement_due.get(str(replica))
    due = parse_timestamp(recorded) if recorded is not None else None
    return due if due is not None and due > now else None
