"""The reconcile loop's timing decisions, with a backend that only records what it is asked."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from torchjob.api.types import PyTorchJob
from torchjob.controller.loop import ACTED_REQUEUE, reconcile_once
from torchjob.core.actions import Action, CreateReplica, Event
from torchjob.core.observed import ReplicaObservation
from torchjob.testing import make_job, running

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


class RecordingBackend:
    def __init__(self, observed: list[ReplicaObservation]) -> None:
        self.observed = observed
        self.executed: list[Action] = []

    def refresh(self, job: PyTorchJob) -> PyTorchJob:
        return job

    def observe(self, job: PyTorchJob) -> list[ReplicaObservation]:
        return self.observed

    def execute(self, job: PyTorchJob, actions: list[Action]) -> None:
        self.executed += actions

    def record_status(self, job: PyTorchJob, events: list[Event]) -> None:
        pass

    def wait(self, until: datetime | None) -> None:
        pass


class FixedClock:
    def now(self) -> datetime:
        return NOW


def test_a_pass_that_started_replicas_looks_again_soon() -> None:
    """So the status (and `torchjob list`) says Running as soon as the replicas run."""
    backend = RecordingBackend([])
    result = reconcile_once(make_job("j").master().workers(1).build(), backend, FixedClock())
    assert any(isinstance(a, CreateReplica) for a in backend.executed)
    assert result.requeue_at is not None and result.requeue_at <= NOW + ACTED_REQUEUE


def test_a_quiet_pass_does_not_hurry() -> None:
    job = make_job("j").master().workers(1).build()
    first = reconcile_once(job, RecordingBackend([]), FixedClock()).job
    replicas = [running(r) for r in ("master-0", "worker-0")]
    backend = RecordingBackend(replicas)
    second = reconcile_once(first, backend, FixedClock())
    assert backend.executed == []
    assert second.requeue_at is None or second.requeue_at > NOW + timedelta(seconds=1)
