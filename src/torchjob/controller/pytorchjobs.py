"""One PyTorchJob's reconcile pass on a cluster: read it fresh, plan with the same planner as ``torchjob run``,
act through the Kubernetes backend, and requeue at the time the planner asks for. A job the CRD's schema let
through but the API refuses gets a Failed condition saying what is wrong; a job another controller manages
(``runPolicy.managedBy``) is left alone."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from lightkube import ApiError, Client

from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.loading import job_from_mapping
from torchjob.api.types import ConditionType, JobStatus
from torchjob.backends.kubernetes.backend import KubernetesBackend
from torchjob.backends.kubernetes.cluster import JobKey, PyTorchJobResource, as_dict
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.backends.kubernetes.requests import RequestCounter
from torchjob.controller.clock import Clock
from torchjob.controller.loop import reconcile_once
from torchjob.controller.metrics import OperatorMetrics
from torchjob.core import conditions
from torchjob.core.actions import Event
from torchjob.core.times import timestamp

log = logging.getLogger("torchjob.operator")


@dataclass(frozen=True)
class PassDeps:
    """What a PyTorchJob's pass works with, made once by the operator (the pass never reaches back into it)."""

    client: Client
    backend: KubernetesBackend
    clock: Clock
    counter: RequestCounter  # API requests, by verb
    metrics: OperatorMetrics
    reports: ReportBoard | None  # None when the operator serves no report endpoint
    managed_by: Collection[str]  # the runPolicy.managedBy values this operator serves
    requeue: Callable[[JobKey, float], None]  # look at the job again after this many seconds
    passed: Callable[[], None]  # one pass done (the health endpoint counts them)


class PyTorchJobs:
    """The pass over one PyTorchJob."""

    def __init__(self, deps: PassDeps) -> None:
        self.deps = deps

    def reconcile(self, key: JobKey) -> None:
        began = datetime.now(timezone.utc)  # the report board's clock
        self._reconcile(key)
        if self.deps.reports is not None:
            # What the pass decided is published: members on notice heard before it began may go on it.
            self.deps.reports.notices.looked_at(*key, began)

    def _reconcile(self, key: JobKey) -> None:
        namespace, name = key
        self.deps.counter.add("get")
        try:
            wire = as_dict(self.deps.client.get(PyTorchJobResource, name, namespace=namespace))
        except ApiError as err:
            if err.status.code == 404:
                self.deps.metrics.forget(key)
                return  # deleted: its Pods and Services go with it (ownerReferences)
            raise
        if (wire.get("metadata") or {}).get("deletionTimestamp"):
            self.deps.metrics.forget(key)
            return  # being deleted: the garbage collector removes its Pods and Services; creating more would fight it
        managed_by = ((wire.get("spec") or {}).get("runPolicy") or {}).get("managedBy")
        if managed_by and managed_by not in self.deps.managed_by:
            self.deps.metrics.forget(key)
            return
        try:
            job = job_from_mapping(wire, source=f"PyTorchJob {namespace}/{name}")
        except (ValidationError, JobFileError) as err:
            self._reject(wire, str(err))
            return
        before = conditions.state(job.status)
        started = time.monotonic()
        try:
            result = reconcile_once(job, self.deps.backend, self.deps.clock)
        finally:
            self.deps.backend.end_pass()
        self.deps.passed()
        after = conditions.state(result.job.status)
        self.deps.metrics.passed(key, after, result.events, self.deps.clock.now(), time.monotonic() - started)
        if after != before:
            log.info("%s/%s: %s → %s (attempt %d)", namespace, name, before, after, result.job.status.attempt + 1)
        for event in (e for e in result.events if e.type == "Warning"):  # a repair, a hang, a lost node: worth a line
            log.info("%s/%s: %s (%s)", namespace, name, event.message, event.reason)
        if result.requeue_at is not None:
            self.deps.requeue(key, (result.requeue_at - self.deps.clock.now()).total_seconds())

    def _reject(self, wire: dict[str, Any], problem: str) -> None:
        """An invalid job (one the CRD's schema let through) gets a Failed condition saying what is wrong."""
        status = JobStatus.model_validate(wire.get("status") or {})
        if conditions.is_true(status, ConditionType.FAILED):
            return
        metadata = wire["metadata"]
        cause = f"its spec is invalid: {problem}"
        now = self.deps.clock.now()
        message = conditions.fail_job(status, metadata["namespace"], metadata["name"], cause, now)
        status.last_reconcile_time = timestamp(now)
        wire_status = status.model_dump(by_alias=True, exclude_none=True, mode="json")
        self.deps.backend.patch_status(metadata["namespace"], metadata["name"], wire_status)
        self.deps.backend.emit(
            metadata["namespace"], metadata["name"], metadata.get("uid"), Event("Warning", "InvalidSpec", message)
        )
