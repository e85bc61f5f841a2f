"""A fake platform and a fake clock, to unit-test the reconcile loop without processes, Pods or sleeping.

``FakeBackend`` keeps replicas in memory: what the planner creates runs at once, what it deletes is gone by
the next pass, and the test decides how each replica ends (``finish``). ``FakeClock`` only moves when told
to, or when the loop waits (``wait`` jumps to the time the loop asked to be woken), so a test of a one-hour
deadline takes no time and its assertions can name exact instants.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from torchjob.api.types import JobStatus, PyTorchJob
from torchjob.backends.base import Backend
from torchjob.core.actions import (
    Action,
    CreateRendezvousStore,
    CreateReplica,
    DeleteJob,
    DeleteRendezvousStore,
    DeleteReplica,
    Event,
)
from torchjob.core.observed import Observed, ReplicaObservation
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
    replicas: dict[tuple[str, int], ReplicaObservation] = field(default_factory=dict)
    store_running: bool = False
    executed: list[Action] = field(default_factory=list)
    statuses: list[JobStatus] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    waits: list[datetime | None] = field(default_factory=list)
    job_deleted: bool = False

    # -- Backend --------------------------------------------------------------------------------------

    def observe(self, job: PyTorchJob) -> Observed:
        # A replica asked to stop is gone by the next look (no grace period on this platform).
        for key in [k for k, o in self.replicas.items() if o.stopping]:
            del self.replicas[key]
        return Observed(list(self.replicas.values()), store_running=self.store_running)

    def execute(self, job: PyTorchJob, actions: list[Action]) -> None:
        self.executed += actions
        for action in actions:
            if isinstance(action, CreateReplica):
                self.replicas[(str(action.replica), action.attempt)] = running(str(action.replica), action.attempt)
            elif isinstance(action, DeleteReplica):
                key = (str(action.replica), action.attempt)
                if key in self.replicas:
                    self.replicas[key] = replace(self.replicas[key], stopping=True)
            elif isinstance(action, CreateRendezvousStore):
                self.store_running = True
            elif isinstance(action, DeleteRendezvousStore):
                self.store_running = False
            elif isinstance(action, DeleteJob):
                self.job_deleted = True

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

    # -- the test's hand ------------------------------------------------------------------------------

    def finish(self, name: str, attempt: int = 0, exit_code: int = 0, message: str | None = None) -> None:
        """Replica ``name`` of ``attempt`` exits now with ``exit_code``."""
        if (name, attempt) not in self.replicas:
            raise KeyError(f"{name} of attempt {attempt} is not running")
        ended = succeeded(name, attempt) if exit_code == 0 else failed(name, attempt, exit_code, message=message)
        self.replicas[(name, attempt)] = ended

    @property
    def live(self) -> list[str]:
        return sorted(f"{name}@{attempt}" for (name, attempt), o in self.replicas.items() if o.phase.live)
