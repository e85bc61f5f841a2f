"""What every backend does for the reconcile loop: observe a job, carry out the planner's actions, record.

Only what both backends share is here. What the local driver alone needs (a pending scale request, waiting
on process exits) belongs to ``LocalBackend`` and ``controller/supervise.py``; the operator is woken by
watches instead.
"""

from __future__ import annotations

from typing import Protocol

from torchjob.api.types import PyTorchJob
from torchjob.core.actions import Action, Event
from torchjob.core.observed import Observed


class Backend(Protocol):
    # Whether the replicas can reach a rendezvous host the job names (``elasticPolicy.rdzvHost``); when they
    # cannot, torchjob hosts the job's rendezvous store itself. A fact about the platform, for the planner.
    reaches_rdzv_host: bool
    # Whether a lost member's place can go to a warm spare while the survivors carry on (in-place repair).
    repairs_in_place: bool
    # Whether torchjob.train's progress reports reach the controller (heartbeat files locally; an operator
    # started with a report address on a cluster). Without them a progress deadline cannot be enforced.
    reports_progress: bool
    # Whether every replica runs on the controller's own machine (local processes): a silent one is then never a
    # lost host, and a frozen process may be named as soon as its peers are seen waiting for it. On a cluster a
    # silent replica may be its vanished node, which the node-loss witnesses name (not counted, unlike a hang).
    one_host: bool

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
