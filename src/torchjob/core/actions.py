"""What the planner asks a backend to do, and the plan that carries it with the job's new status."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from torchjob.api.types import GroupMembership, JobStatus
from torchjob.core.replicas import ReplicaId


@dataclass(frozen=True)
class CreateReplica:
    """Start one replica (a process, or a Pod and its headless Service) for an attempt.

    Where it meets its group is the planner's decision, carried here so that no backend makes it again:
    ``rendezvous_at_store``, an elastic group's agents rendezvous at the store torchjob hosts (outside every
    agent); ``meets_at_store``, the group itself forms there (in-place repair: it outlives every member).
    """

    replica: ReplicaId
    attempt: int
    rendezvous_at_store: bool = False
    meets_at_store: bool = False


@dataclass(frozen=True)
class DeleteReplica:
    """Stop and remove one replica: SIGTERM, then SIGKILL after the grace period. Its logs are kept.

    ``final`` when the job is over: what the replica kept across attempts (its Service) goes with it.
    ``at_once``: no grace period (a hung replica, whose peers wait for it in a collective, acts on no SIGTERM).
    ``force``: removed without waiting for a kubelet to confirm the stop: one lost with its node (there is no
    kubelet), or a survivor of a group restart after a hang or a lost node (see ``PassState._stop_all``).
    """

    replica: ReplicaId
    attempt: int
    reason: str
    final: bool = False
    at_once: bool = False
    force: bool = False


@dataclass(frozen=True)
class RestartWarm:
    """End a replica's attempt without removing its Pod, whose warm interpreter (``torchjob.launch``) will start
    the next attempt there: the Pod moves to ``next_attempt`` and what is left of its trainer is stopped
    (``at_once``: without a grace period, see DeleteReplica). It stands for the DeleteReplica of a group restart:
    until that trainer has ended the replica is observed in its old attempt, being stopped; then the next
    attempt's CreateReplica starts the script again in the same Pod, without a Pod's start and torch's import."""

    replica: ReplicaId
    attempt: int
    next_attempt: int
    at_once: bool = False


@dataclass(frozen=True)
class CreateRendezvousStore:
    """Start the job's c10d rendezvous store, outside every agent, so any member of an elastic group can be
    lost (see ``policies/elastic.hosts_rendezvous_store``). One per job, for the job's whole life."""


@dataclass(frozen=True)
class DeleteRendezvousStore:
    """Stop the job's rendezvous store (the job is over; the store holds no logs)."""


@dataclass(frozen=True)
class CreateSpare:
    """Start a warm spare for an attempt: the group's script, stopped in ``torchjob.train.init`` until needed.
    A spare exists only beside a group that meets at torchjob's store, so it always meets there too; where
    its agents' rendezvous points is the group's (``CreateReplica.rendezvous_at_store``)."""

    attempt: int
    rendezvous_at_store: bool = False


@dataclass(frozen=True)
class DeleteSpare:
    """Stop a spare (its attempt ended, or the job did)."""

    name: str
    reason: str


@dataclass(frozen=True)
class RepairReplica:
    """Give a replica's place in its running group to a ready spare: the spare becomes that replica (a lost
    one's remains are removed, a hung one is stopped first). A ``ReformGroup`` of the same pass tells the group."""

    replica: ReplicaId
    attempt: int
    spare: str
    # The lost replica went with its node: its remains are removed by force (see DeleteReplica).
    force: bool = False
    # The replica still runs, on notice of its eviction: it leaves the group at the next step by itself, and its
    # Pod (process) is left to the platform's grace period rather than removed.
    handover: bool = False


@dataclass(frozen=True)
class ReformGroup:
    """Tell a running group its next membership (torchjob.train.in_place reads it; ``status.membership`` keeps
    it). The members re-form around it in place: at once after a lost member, at their next step otherwise
    (an elastic group that grows or shrinks)."""

    membership: GroupMembership


@dataclass(frozen=True)
class DeleteStuckPod:
    """Remove a Pod by force (no grace period): nothing else will ever remove it (``observed.StuckPod``)."""

    name: str
    why: str


@dataclass(frozen=True)
class ReorderStop:
    """Order again the stop of a replica's trainer of an earlier attempt, which its launcher still runs: the
    order was given by an operator that has since lost the lead (``observed.UnorderedStop``)."""

    replica: ReplicaId
    attempt: int


@dataclass(frozen=True)
class LeaveGroup:
    """Order a survivor's training processes out of a group whose member was lost without a word to them (its
    node vanished: no reset crosses a dead link, so their collective waits for the group's whole timeout). They
    exit, and the replica's launcher (torchrun's agent) forms the group again with the members that are left.
    Only the processes running at the order leave: the ones the launcher starts next are not told."""

    replica: ReplicaId
    attempt: int
    why: str


@dataclass(frozen=True)
class DeleteJob:
    """Remove the job itself (ttlSecondsAfterFinished passed)."""

    reason: str


@dataclass(frozen=True)
class Cause:
    """Why the planner acted: in words for people, as a kind for counting (``OOMKilled``, ``ExitCode``,
    ``Signal``, ``Hung``...), and when the trouble began (a replica's failure, the last progress of a hung
    group), so the time to detect it can be measured."""

    text: str
    kind: str = ""
    began_at: datetime | None = None


@dataclass(frozen=True)
class Event:
    """Something a person should see: a Kubernetes Event, or a line in ``torchjob run``'s output. Restarts,
    repairs and failures carry their cause (the operator's metrics count them by it)."""

    type: str  # Normal | Warning
    reason: str
    message: str
    cause: Cause | None = None


Action = (
    CreateReplica
    | DeleteReplica
    | RestartWarm
    | CreateRendezvousStore
    | DeleteRendezvousStore
    | CreateSpare
    | DeleteSpare
    | RepairReplica
    | ReformGroup
    | DeleteStuckPod
    | ReorderStop
    | LeaveGroup
    | DeleteJob
)


@dataclass
class Plan:
    actions: list[Action]
    status: JobStatus
    events: list[Event] = field(default_factory=list)
    # When the planner must run again even if nothing is observed to change (deadline, TTL).
    requeue_at: datetime | None = None
