"""The working state of one planning pass (``core/planning.py``): the job, what was observed, the status
being written, the actions, events and wake-up time decided so far, and the small helpers every decision
uses. Pure, like the planner.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from torchjob.api.types import ConditionType, JobStatus, PyTorchJob
from torchjob.core import conditions
from torchjob.core.actions import Action, DeleteReplica, Event
from torchjob.core.observed import ReplicaObservation, SpareObservation


@dataclass(frozen=True)
class Helpers:
    """What the group needs beside its replicas, wanted and as observed."""

    store_needed: bool  # torchjob hosts this job's rendezvous store
    store_running: bool
    spares: list[SpareObservation]
    spares_wanted: int  # idle ones
    reports_progress: bool  # the platform hears torchjob.train's progress reports
    in_place: bool  # the group is repaired in place (torchjob.train.inplace) on this platform
    regroups: bool  # an elastic group under in-place repair: policies/regroup decides its membership


class PassState:
    """One planning pass's working copy of the status, and what it decided so far."""

    def __init__(self, job: PyTorchJob, observed: list[ReplicaObservation], now: datetime, helpers: Helpers) -> None:
        self.job = job
        self.observed = observed
        self.now = now
        self.helpers = helpers
        self.status: JobStatus = job.status.model_copy(deep=True)
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.requeue_at: datetime | None = None

    def _current(self) -> list[ReplicaObservation]:
        return [o for o in self.observed if o.attempt == self.status.attempt]

    def _stop_all(self, replicas: list[ReplicaObservation], reason: str) -> None:
        self.actions += [DeleteReplica(o.replica, o.attempt, reason) for o in replicas if not o.stopping]

    # -- helpers --------------------------------------------------------------------------------------

    def _kind_name(self) -> str:
        return f"PyTorchJob {self.job.namespace}/{self.job.name}"

    def _condition(self, ctype: ConditionType, reason: str, message: str, value: str = "True") -> None:
        conditions.set_condition(self.status, ctype, value, reason, message, self.now)

    def _wake_at(self, when: datetime | None) -> None:
        if when is not None and (self.requeue_at is None or when < self.requeue_at):
            self.requeue_at = when
