"""A fake platform and a fake clock, to unit-test the reconcile loop without processes, Pods or sleeping.

``FakeBackend`` keeps replicas in memory: what the planner creates runs at once, what it deletes is gone by
the next pass, and the test decides how each replica ends (``finish``). It simulates every action, in-place
repair included: spares start warm (or when the test says, ``warm_spares``), a repair makes the spare the
replica, and the last membership the planner published is served until the test forgets it (``forget``).
``FakeClock`` only moves when told to, or when the loop waits (``wait`` jumps to the time the loop asked to be
woken), so a test of a one-hour deadline takes no time and its assertions can name exact instants.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from typing_extensions import assert_never

from torchjob.api.types import GroupMembership, JobStatus, PyTorchJob
from torchjob.backends.base import Backend
from torchjob.core.actions import (
    Action,
    CreateRendezvousStore,
    CreateReplica,
    CreateSpare,
    DeleteJob,
    DeleteRendezvousStore,
    DeleteReplica,
    DeleteSpare,
    DeleteStuckPod,
    Event,
    LeaveGroup,
    ReformGroup,
    ReorderStop,
    RepairReplica,
    RestartWarm,
)
from torchjob.core.observed import Observed, Platform, ReplicaObservation, SpareObservation, StuckPod, UnorderedStop
from torchjob.testing.builders import failed, running, succeeded

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
# How far one wait moves the clock when the loop names no time to be woken at (a live backend's idle timeout).
IDLE_STEP = timedelta(seconds=5)


@dataclass
class FakeClock:
    current: datetime = START

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


@dataclass
class FakeBackend(Backend):
    """A platform whose replicas do exactly what the test says. Records everything it is asked."""

    clock: FakeClock = field(default_factory=FakeClock)
    reaches_rdzv_host: bool = True
    repairs_in_place: bool = False
    reports_progress: bool = True
    one_host: bool = False
    replicas: dict[tuple[str, int], ReplicaObservation] = field(default_factory=dict)
    store_running: bool = False
    executed: list[Action] = field(default_factory=list)
    statuses: list[JobStatus] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    waits: list[datetime | None] = field(default_factory=list)
    job_deleted: bool = False
    spares: dict[str, SpareObservation] = field(default_factory=dict)
    spares_started: int = 0
    warm_spares: bool = True  # a spare is ready as soon as it starts (else: the test calls warm())
    membership: GroupMembership | None = None  # the membership the group can read now
    waiting_warm: set[str] = field(default_factory=set)  # replicas whose Pod waits to start the next attempt

    stuck: list[StuckPod] = field(default_factory=list)  # reported on every look until a forced delete
    unordered_stops: list[UnorderedStop] = field(default_factory=list)  # reported until a stop is ordered again
    stuck_removed: list[str] = field(default_factory=list)
    stops_reordered: list[tuple[str, int]] = field(default_factory=list)
    ordered_to_leave: list[tuple[str, int]] = field(default_factory=list)  # survivors told to leave their group

    # -- Backend --------------------------------------------------------------------------------------

    @property
    def platform(self) -> Platform:
        return Platform(self.reaches_rdzv_host, self.repairs_in_place, self.reports_progress, self.one_host)

    def observe(self, job: PyTorchJob) -> Observed:
        # A replica or spare asked to stop is gone by the next look (no grace period on this platform).
        for key in [k for k, o in self.replicas.items() if o.stopping]:
            del self.replicas[key]
        for name in [n for n, s in self.spares.items() if s.stopping]:
            del self.spares[name]
        served = None if self.membership is None else (self.membership.attempt, self.membership.generation)
        return Observed(
            list(self.replicas.values()),
            store_running=self.store_running,
            spares=list(self.spares.values()),
            published_membership=served,
            stuck=list(self.stuck),
            unordered_stops=list(self.unordered_stops),
        )

    def execute(self, job: PyTorchJob, actions: list[Action]) -> None:
        self.executed += actions
        for action in actions:
            match action:
                case CreateReplica():
                    warm = str(action.replica) in self.waiting_warm
                    self.waiting_warm.discard(str(action.replica))
                    self._run(str(action.replica), action.attempt)
                    if warm:  # started in the Pod that waited for it: still able to restart warm
                        key = (str(action.replica), action.attempt)
                        self.replicas[key] = replace(self.replicas[key], restarts_warm=True)
                case DeleteReplica():
                    key = (str(action.replica), action.attempt)
                    if key in self.replicas:
                        self.replicas[key] = replace(self.replicas[key], stopping=True)
                case RestartWarm():
                    # Its Pod stays: stopped now (gone by the next look), it starts the next attempt warm.
                    key = (str(action.replica), action.attempt)
                    if key in self.replicas:
                        self.replicas[key] = replace(self.replicas[key], stopping=True)
                        self.waiting_warm.add(str(action.replica))
                case CreateRendezvousStore():
                    self.store_running = True
                case DeleteRendezvousStore():
                    self.store_running = False
                case CreateSpare():
                    name = f"spare-{self.spares_started}"
                    self.spares_started += 1
                    self.spares[name] = SpareObservation(name, action.attempt, ready=self.warm_spares)
                case DeleteSpare():
                    if action.name in self.spares:
                        self.spares[action.name] = replace(self.spares[action.name], stopping=True)
                case RepairReplica():
                    # The spare becomes the replica: the lost one's remains go, the group carries on.
                    if self.spares.pop(action.spare, None) is not None:
                        self._run(str(action.replica), action.attempt)
                case ReformGroup():
                    self.membership = action.membership
                case DeleteStuckPod():
                    self.stuck = [stuck for stuck in self.stuck if stuck.name != action.name]
                    self.stuck_removed.append(action.name)
                case ReorderStop():
                    lost = UnorderedStop(action.replica, action.attempt)
                    self.unordered_stops = [stop for stop in self.unordered_stops if stop != lost]
                    self.stops_reordered.append((str(action.replica), action.attempt))
                case LeaveGroup():
                    self.ordered_to_leave.append((str(action.replica), action.attempt))
                case DeleteJob():
                    self.job_deleted = True
                case _:
                    assert_never(action)

    def record_status(self, job: PyTorchJob) -> None:
        self.statuses.append(job.status.model_copy(deep=True))

    def publish(self, job: PyTorchJob, events: list[Event]) -> None:
        self.events += events

    # -- what a self-driven loop also needs (controller.supervise.run_until_done) ------------------------

    def refresh(self, job: PyTorchJob) -> PyTorchJob:
        return job

    def wait(self, until: datetime | None) -> None:
        self.waits.append(until)
        target = self.clock.now() + IDLE_STEP if until is None else until
        self.clock.current = max(self.clock.current, target)

    def _run(self, name: str, attempt: int) -> None:
        # Under in-place repair every replica trains in the in-place loop (it announced itself).
        self.replicas[(name, attempt)] = replace(running(name, attempt), repairable=self.repairs_in_place)

    # -- the test's hand ------------------------------------------------------------------------------

    def warm(self) -> None:
        """Every spare that is starting is warm and waiting now."""
        self.spares = {n: replace(s, ready=True) for n, s in self.spares.items()}

    def forget(self) -> None:
        """The platform loses the membership it served (the operator that served it restarted)."""
        self.membership = None

    def finish(self, name: str, attempt: int = 0, exit_code: int = 0, message: str | None = None) -> None:
        """Replica ``name`` of ``attempt`` exits now with ``exit_code``."""
        if (name, attempt) not in self.replicas:
            raise KeyError(f"{name} of attempt {attempt} is not running")
        ended = succeeded(name, attempt) if exit_code == 0 else failed(name, attempt, exit_code, message=message)
        self.replicas[(name, attempt)] = replace(ended, repairable=self.replicas[(name, attempt)].repairable)

    @property
    def live(self) -> list[str]:
        return sorted(f"{name}@{attempt}" for (name, attempt), o in self.replicas.items() if o.phase.live)
