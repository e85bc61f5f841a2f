"""The interface every backend implements: observe a job's replicas, carry out the planner's actions."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from torchjob.api.types import PyTorchJob
from torchjob.core.actions import Action, Event
from torchjob.core.observed import ReplicaObservation


class Backend(Protocol):
    def refresh(self, job: PyTorchJob) -> PyTorchJob:
        """The job as it is to be planned now, with changes asked for since the last pass (e.g. a scale)."""
        ...

    def observe(self, job: PyTorchJob) -> list[ReplicaObservation]:
        """The job's replicas as they are now, of every attempt that still has one."""
        ...

    def execute(self, job: PyTorchJob, actions: list[Action]) -> None:
        """Carry out actions; may return before they complete (a stop takes its grace period)."""
        ...

    def record_status(self, job: PyTorchJob, events: list[Event]) -> None:
        """Persist the job's status (called only when it changed) and publish events."""
        ...

    def wait(self, until: datetime | None) -> None:
        """Block until something about the replicas may have changed, or until ``until``."""
        ...
