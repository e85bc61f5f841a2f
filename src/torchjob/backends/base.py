"""What every backend does for the reconcile loop: observe a job, carry out the planner's actions, record.

Only what both backends share is here. What the local driver alone needs (a pending scale request, waiting
on process exits) belongs to ``LocalBackend`` and ``controller/local_driver.py``; the operator is woken by
watches instead.
"""

from __future__ import annotations

from typing import Protocol

from torchjob.api.types import PyTorchJob
from torchjob.core.actions import Action, Event
from torchjob.core.observed import Observed, Platform


class Backend(Protocol):
    # What the platform can do (``core.observed.Platform``): facts the planner reads with each observation.
    @property
    def platform(self) -> Platform: ...

    def observe(self, job: PyTorchJob) -> Observed:
        """The job's replicas as they are now, of every attempt that still has one, and its store."""
        ...

    def execute(self, job: PyTorchJob, actions: list[Action]) -> None:
        """Carry out actions; may return before they complete (a stop takes its grace period)."""
        ...

    def record_status(self, job: PyTorchJob) -> None:
        """Persist the job's status. Called only when the planner changed it."""
        ...

    def publish(self, job: PyTorchJob, events: list[Event]) -> None:
        """Show events to people: Kubernetes Events on the job, or lines in ``torchjob run``'s output."""
        ...
