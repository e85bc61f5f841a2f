"""What a backend observed of a job's replicas: the planner's only input besides the job and the clock."""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from torchjob import worker_files
from torchjob.core.replicas import ReplicaId


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
class Progress:
    """What one replica last reported of its training (torchjob.train's heartbeat), and when it came.

    ``at`` is when the step completed (locally) or when the first report of that step arrived (on a cluster,
    by the operator's clock, so a Pod's skewed clock cannot fake progress). ``alive_at`` is when the process
    last proved it runs (its reporting thread beat), whether or not the step moved. The rest is as reported;
    None when not reported.
    """

    at: datetime
    step: int
    total_steps: int | None = None
    loss: float | None = None
    samples_per_second: float | None = None
    seconds_per_step: float | None = None
    alive_at: datetime | None = None
    # The process said it is exiting on its own (its last report): silence after it proves nothing.
    exiting: bool = False
    # What hang detection learns from (policies/learned.py): the longest gap between two of its steps (time
    # in named phases left out) and how many gaps it has seen; the phase it is in and since when; the longest
    # it has seen of each phase.
    longest_gap: float | None = None
    gaps_seen: int = 0
    section: str | None = None
    section_since: datetime | None = None
    sections_longest: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_report(
        cls, report: Mapping[str, object], at: datetime, alive_at: datetime | None = None
    ) -> Progress | None:
        """A report as the worker wrote it (``worker_files`` names the keys); None when it is not one."""
        step = _whole(report.get(worker_files.REPORT_STEP))
        if step is None:
            return None
        return cls(
            at,
            step,
            alive_at=alive_at,
            total_steps=_whole(report.get(worker_files.REPORT_TOTAL_STEPS)) or None,
            loss=_finite(report.get(worker_files.REPORT_LOSS)),
            samples_per_second=_finite(report.get(worker_files.REPORT_SAMPLES_PER_SECOND)),
            seconds_per_step=_finite(report.get(worker_files.REPORT_SECONDS_PER_STEP)),
            exiting=report.get(worker_files.REPORT_EXITING) is True,
            longest_gap=_finite(report.get(worker_files.REPORT_LONGEST_GAP)),
            gaps_seen=_whole(report.get(worker_files.REPORT_GAPS_SEEN)) or 0,
            sections_longest=_durations(report.get(worker_files.REPORT_SECTIONS_LONGEST)),
            **_section(report.get(worker_files.REPORT_SECTION), alive_at or at),
        )


def _whole(value: object) -> int | None:
    """A non-negative integer as JSON gives it (a bool is not one); None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _durations(value: object) -> dict[str, float]:
    if not isinstance(value, Mapping):
        return {}
    found = {str(name): _finite(seconds) for name, seconds in value.items()}
    return {name: seconds for name, seconds in found.items() if seconds is not None and seconds >= 0}


def _section(value: object, reported_at: datetime) -> dict[str, Any]:
    """The phase a report says the process is in, dated by the report's own time less the time spent in it
    (a duration: a Pod's skewed clock cannot move it)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        return {}
    elapsed = _finite(value.get("elapsed"))
    if elapsed is None or elapsed < 0:
        return {}
    return {"section": value["name"], "section_since": reported_at - timedelta(seconds=elapsed)}


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class MemberAnnouncement:
    """What a member of an in-place group last said of itself, from its watching thread: it trains under the
    in-place loop of ``attempt``, it runs (``heard_at``, sent every ``every`` seconds), and, when its step
    has waited past its allowance, the generation of that step (``waiting_in``): a peer it needs is silent.
    ``longest_gap``: the longest time between two of its announcements in the attempt, by its own count or as
    heard (``silent_member.with_longest_gap``): how late a healthy member of this load can be."""

    attempt: int
    heard_at: datetime
    every: float | None = None
    waiting_in: int | None = None
    longest_gap: float = 0.0

    @classmethod
    def from_message(cls, message: object, heard_at: datetime) -> MemberAnnouncement | None:
        """An announcement as a member sent it (``worker_files`` names the keys); None when it is not one."""
        if not isinstance(message, Mapping):
            return None
        attempt = _whole(message.get(worker_files.ANNOUNCE_ATTEMPT))
        if attempt is None:
            return None
        every = _finite(message.get(worker_files.ANNOUNCE_EVERY))
        waiting = _whole(message.get(worker_files.ANNOUNCE_WAITING))  # the first generation is 0
        gap = max(_finite(message.get(worker_files.ANNOUNCE_LONGEST_GAP)) or 0.0, 0.0)
        return cls(attempt, heard_at, every if every and every > 0 else None, waiting, gap)


@dataclass(frozen=True)
class TrainerState:
    """What a Pod's launcher (torchjob.launch) last said of its trainer: it runs ``attempt``, or it ended with
    ``exit_code`` (first heard at ``ended_at``, by the operator's clock); ``heard_at``: when it last said so."""

    attempt: int
    heard_at: datetime
    exit_code: int | None = None
    ended_at: datetime | None = None

    @classmethod
    def from_message(cls, message: object, heard_at: datetime) -> TrainerState | None:
        """A trainer's state as its launcher sent it (``worker_files`` names the keys); None when it is not one."""
        if not isinstance(message, Mapping):
            return None
        attempt, code = _whole(message.get(worker_files.TRAINER_ATTEMPT)), message.get(worker_files.TRAINER_EXIT_CODE)
        exit_code = _whole(code)
        if attempt is None or (code is not None and (exit_code is None or exit_code > 255)):
            return None
        return cls(attempt, heard_at, exit_code, heard_at if exit_code is not None else None)


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
            what = f"{self.replica} was killed by {_signal_name(self.signal)}"
        elif self.exit_code is not None and self.exit_code > 128 and self.exit_code - 128 < 65:
            what = f"{self.replica} exited with code {self.exit_code} ({_signal_name(self.exit_code - 128)})"
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
class Observed:
    """Everything a backend saw of one job in one pass."""

    replicas: list[ReplicaObservation]
    # The job's rendezvous store runs and is not being stopped.
    store_running: bool = False
    spares: list[SpareObservation] = field(default_factory=list)
    # The (attempt, generation) of the in-place membership the group can read from the backend now (None:
    # none). An operator that restarted serves none until the planner asks it to publish the kept one again.
    published_membership: tuple[int, int] | None = None


def lost_with_node(observation: ReplicaObservation) -> bool:
    """Declared lost with its node (policies/node_loss.py): its Pod can only be removed by force."""
    return observation.reason is PlatformReason.NODE_LOST


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
