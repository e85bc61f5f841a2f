"""The working state of one planning pass (``core/planning.py``): the job, what was observed, the status
being written, the actions, events and wake-up time decided so far, and the small helpers every decision
uses. Pure, like the planner.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from torchjob.api.types import ConditionType, JobStatus, PyTorchJob
from torchjob.core import conditions, envs
from torchjob.core.actions import Action, DeleteReplica, Event, RestartWarm
from torchjob.core.observed import Observed, Platform, ReplicaObservation, SpareObservation, lost_with_node
from torchjob.core.policies import elastic, regroup, repair


@dataclass(frozen=True)
class Helpers:
    """What the group needs beside its replicas, wanted and as observed."""

    store_needed: bool  # torchjob hosts this job's rendezvous store
    rendezvous_at_store: bool  # an elastic group's agents rendezvous at that store
    store_running: bool
    spares: list[SpareObservation]
    spares_wanted: int  # idle ones
    reports_progress: bool  # the platform hears torchjob.train's progress reports
    in_place: bool  # the group is repaired in place (torchjob.train.in_place) on this platform
    regroups: bool  # an elastic group under in-place repair: policies/regroup decides its membership
    one_host: bool = False  # every replica runs on the controller's machine (progress.check's quick rule)

    @staticmethod
    def decide(job: PyTorchJob, observed: Observed, platform: Platform) -> Helpers:
        """What the job needs beside its replicas on a platform that can do what ``platform`` says."""
        in_place = platform.repairs_in_place and envs.in_place(job)
        rendezvous_at_store = elastic.hosts_rendezvous_store(job, honor_rdzv_host=platform.reaches_rdzv_host)
        return Helpers(
            store_needed=rendezvous_at_store or in_place,
            rendezvous_at_store=rendezvous_at_store,
            store_running=observed.store_running,
            spares=list(observed.spares),
            spares_wanted=repair.spares_wanted(job) if in_place else 0,
            reports_progress=platform.reports_progress,
            in_place=in_place,
            regroups=regroup.applies(job, platform.repairs_in_place),
            one_host=platform.one_host,
        )


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
        self.empty_places = 0  # places of a running elastic group that spares are to fill (in_place.regrouped)

    def current_replicas(self) -> list[ReplicaObservation]:
        """The observed replicas of the attempt the status is at."""
        return [o for o in self.observed if o.attempt == self.status.attempt]

    def _stop_all(self, replicas: list[ReplicaObservation], reason: str, at_once: bool = False) -> None:
        """Stop each replica not stopping yet; one lost with its node is asked again on every pass (its Pod is
        removed by force, and until it is gone the next attempt cannot take its name).

        ``at_once`` (a group restart after a hang or a lost node) removes the others by force too: they wait in
        a collective that will never end, so a graceful stop only makes the next attempt wait for their kubelets
        to confirm it (seconds on a loaded node) before it can take their names. Their kubelets still
        kill them; a new Pod of the same name has an address of its own, so no new trainer meets an old one."""
        self.actions += [
            DeleteReplica(o.replica, o.attempt, reason, at_once=at_once, force=at_once or lost_with_node(o))
            for o in replicas
            if not o.stopping or lost_with_node(o)
        ]

    def _end_for_restart(self, replicas: list[ReplicaObservation], reason: str, at_once: bool) -> None:
        """End the attempt's replicas for a group restart: one whose Pod can start the next attempt warm does so
        in place (RestartWarm); the others are stopped, and the next attempt creates them again."""
        warm = [o for o in replicas if o.restarts_warm and not o.stopping]
        self.actions += [RestartWarm(o.replica, o.attempt, self.status.attempt + 1, at_once) for o in warm]
        self._stop_all([o for o in replicas if o not in warm], reason, at_once=at_once)

    # -- helpers --------------------------------------------------------------------------------------

    def _kind_name(self) -> str:
        return f"PyTorchJob {self.job.namespace}/{self.job.name}"

    def _condition(self, ctype: ConditionType, reason: str, message: str, value: str = "True") -> None:
        conditions.set_condition(self.status, ctype, value, reason, message, self.now)

    def wake_at(self, when: datetime | None) -> None:
        """Run the planner again at ``when`` at the latest (a deadline, a repair that may yet complete)."""
        if when is not None and (self.requeue_at is None or when < self.requeue_at):
            self.requeue_at = when
