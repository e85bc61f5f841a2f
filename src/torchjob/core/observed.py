"""What a backend observed of a job's replicas: the planner's only input besides the job and the clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from torchjob.core.replicas import ReplicaId
from torchjob.core.reported import MemberAnnouncement, Progress
from torchjob.signal_names import signal_name


class Phase(str, Enum):
    """A replica's lifecycle, as a Pod phase: Pending → Running → Succeeded | Failed."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def live(self) -> bool:
        return self in (Phase.PENDING, Phase.RUNNING)


class PlatformReason(str, Enum):
    """Why the platform, not the program, ended or is ending a replica."""

    PREEMPTED = "Preempted"  # an outside SIGTERM, a preemption notice, a DisruptionTarget of preemption
    EVICTED = "Evicted"  # the kubelet or the Eviction API took the Pod away
    OOM_KILLED = "OOMKilled"  # over its memory limit (this one is the program's to fix: it counts)
    # A replica of a running group that is simply gone (its Pod deleted by hand or by a lost node's garbage
    # collection). A lone replacement could never rejoin a static DDP group (kubeflow/trainer #1478), so it
    # ends the attempt like any failure, but it is not the program's fault either.
    VANISHED = "Vanished"
    # Its node stopped reporting (the node lifecycle controller marked it Ready=Unknown): a spot VM that vanished,
    # a node cut off. Its Pod can only be removed by force, since no kubelet will ever confirm the stop.
    NODE_LOST = "NodeLost"


@dataclass(frozen=True)
class SilentNode:
    """A node whose kubelet stopped reporting, and when it was last heard; ``unreachable``: the operator's own
    connection to it goes unanswered too (a host that vanished, not only a kubelet that stopped)."""

    name: str
    since: datetime
    unreachable: bool = False


@dataclass(frozen=True)
class ReplicaObservation:
    """One replica (process or Pod) of one attempt, as it is now."""

    replica: ReplicaId
    attempt: int
    phase: Phase
    exit_code: int | None = None
    # The signal that ended it, when it was killed by one (a Pod reports these as exit code 128+N).
    signal: int | None = None
    reason: PlatformReason | None = None
    # The last lines of its output, or the exception it raised.
    message: str | None = None
    finished_at: datetime | None = None
    # A stop was already requested; the planner does not ask again.
    stopping: bool = False
    # The training progress the replica last reported (torchjob.train's heartbeat), if it reports any.
    progress: Progress | None = None
    # When the platform told the replica to stop (a preemption notice, a Pod's DisruptionTarget condition).
    # Its failure began then, not when it finally exited after checkpointing; peers that crash meanwhile
    # are collateral damage.
    disrupted_at: datetime | None = None
    # Every process of the replica trains under torchjob.train's in-place repair: its group can replace a
    # lost member around it without stopping it.
    repairable: bool = False
    # Its node stopped reporting (Ready=Unknown). The planner decides whether the replica is lost with it
    # (policies/node_loss.py): its containers may still run.
    silent_node: SilentNode | None = None
    # What it last announced as a member of an in-place group of its attempt (None: nothing, or an earlier one's).
    member: MemberAnnouncement | None = None
    # Running, yet nothing it reported has reached this operator since it began to listen at this time (a new
    # leader hears only what Pods send after it took over): None when it was heard, or nobody listens.
    unheard_since: datetime | None = None
    # Its Pod keeps a warm interpreter that can start the next attempt in place (torchjob.launch): a group
    # restart restarts it there instead of deleting it.
    restarts_warm: bool = False

    def __post_init__(self) -> None:
        # A reason given by its value ("Evicted", as the API server spells it) is the same reason.
        if self.reason is not None and not isinstance(self.reason, PlatformReason):
            object.__setattr__(self, "reason", PlatformReason(self.reason))

    @property
    def last_beat(self) -> datetime | None:
        """When the replica's process last proved it runs (its reports' beat); None when it never reported."""
        return self.progress.alive_at if self.progress is not None else None

    @property
    def failure_onset(self) -> datetime | None:
        """When this replica's failure began: its disruption notice if it had one, else its exit."""
        return self.disrupted_at or self.finished_at

    @property
    def effective_exit_code(self) -> int | None:
        """The exit code as a container reports it: 128+N for death by signal N."""
        if self.signal is not None:
            return 128 + self.signal
        return self.exit_code

    def describe(self) -> str:
        """The root cause in words, e.g. ``worker-1 exited with code 3: ValueError: bad input``."""
        if self.reason is PlatformReason.PREEMPTED:
            what = f"{self.replica} was preempted (SIGTERM from outside torchjob)"
        elif self.reason is PlatformReason.VANISHED:
            what = f"{self.replica} vanished while the group was running (its Pod was deleted)"
        elif self.reason is PlatformReason.NODE_LOST:
            what = f"{self.replica} was lost with its node"
        elif self.reason in (PlatformReason.OOM_KILLED, PlatformReason.EVICTED):
            what = f"{self.replica} was {self.reason.value}"
            if self.effective_exit_code is not None:
                what += f" (exit code {self.effective_exit_code})"
        elif self.signal is not None:
            what = f"{self.replica} was killed by {signal_name(self.signal)}"
        elif self.exit_code is not None and self.exit_code > 128 and self.exit_code - 128 < 65:
            what = f"{self.replica} exited with code {self.exit_code} ({signal_name(self.exit_code - 128)})"
        elif self.exit_code is not None:
            what = f"{self.replica} exited with code {self.exit_code}"
        else:
            what = f"{self.replica} failed" + (f" ({self.reason.value})" if self.reason else "")
        if self.message:
            what += f": {self.message}"
        return what


@dataclass(frozen=True)
class SpareObservation:
    """A warm spare process: the same script as the group's replicas, waiting to take a lost one's place."""

    name: str
    attempt: int
    ready: bool  # warm (torch and the script loaded) and waiting; False while it starts
    stopping: bool = False
    failed: bool = False  # it ended on its own: it is no spare any more, and goes


@dataclass(frozen=True)
class StuckPod:
    """A Pod of the job that would hold it up for good, which only a forced delete removes: one whose deletion
    was decided on a node that stopped reporting (no kubelet will confirm it), a spare or the rendezvous store
    kept off a node that reports again and that the scheduler cannot place elsewhere, the store or a spare on a
    silent node.
    ``left_out``: not among the pass's replicas, spares or store (the planner treats it as gone already)."""

    name: str
    why: str
    left_out: bool


@dataclass(frozen=True)
class UnorderedStop:
    """A replica moved into ``attempt`` whose launcher still runs an earlier attempt's trainer with no order
    waiting: the stop was ordered by an operator that has since lost the lead (orders live in its memory)."""

    replica: ReplicaId
    attempt: int


@dataclass(frozen=True)
class Observed:
    """Everything a backend saw of one job in one pass."""

    replicas: list[ReplicaObservation]
    # The job's rendezvous store runs and is not being stopped.
    store_running: bool = False
    spares: list[SpareObservation] = field(default_factory=list)
    # The (attempt, generation) of the in-place membership the group can read from the backend now (None:
    # none). An operator that restarted serves none until the planner asks it to publish the kept one again.
    published_membership: tuple[int, int] | None = None
    stuck: list[StuckPod] = field(default_factory=list)
    unordered_stops: list[UnorderedStop] = field(default_factory=list)


@dataclass(frozen=True)
class Platform:
    """What the platform a backend drives can do: facts the planner reads, never decisions."""

    # The replicas can reach a rendezvous host the job names (``elasticPolicy.rdzvHost``); where they cannot,
    # torchjob hosts the job's rendezvous store itself (a cluster resolves the name, a laptop does not).
    reaches_rdzv_host: bool = True
    # A lost member's place can go to a warm spare while the survivors carry on (in-place repair).
    repairs_in_place: bool = False
    # torchjob.train's progress reports reach the controller (heartbeat files locally; an operator started with
    # a report address on a cluster). Without them no progress deadline can be enforced.
    reports_progress: bool = True
    # Every replica runs on the controller's own machine (local processes): a silent one is never a lost host,
    # and a frozen process may be named as soon as its peers are seen waiting for it. On a cluster a silent
    # replica may be its vanished node, which the node-loss witnesses name (not counted, unlike a hang).
    one_host: bool = False


def lost_with_node(observation: ReplicaObservation) -> bool:
    """Declared lost with its node (policies/node_loss.py): its Pod can only be removed by force."""
    return observation.reason is PlatformReason.NODE_LOST
