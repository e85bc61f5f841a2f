"""One PyTorchJob's reconcile pass on a cluster: read it fresh, plan with the same planner as ``torchjob run``,
act through the Kubernetes backend, and requeue at the time the planner asks for. A job the CRD's schema let
through but the API refuses gets a Failed condition saying what is wrong; a job another controller manages
(``runPolicy.managedBy``) is left alone."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from lightkube import ApiError

from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.loading import job_from_mapping
from torchjob.api.types import ConditionType, JobStatus
from torchjob.backends.kubernetes.cluster import PyTorchJobResource, as_dict
from torchjob.controller.loop import reconcile_once
from torchjob.controller.watching import JobKey
from torchjob.core import conditions
from torchjob.core.actions import Event
from torchjob.core.times import timestamp

if TYPE_CHECKING:
    from torchjob.controller.operator import Operator

log = logging.getLogger("torchjob.operator")


class PyTorchJobs:
    """The pass over one PyTorchJob, with the operator's client, backend, clock, metrics and queue."""

    def __init__(self, operator: Operator) -> None:
        self.operator = operator

    def reconcile(self, key: JobKey) -> None:
        began = datetime.now(timezone.utc)  # the report board's clock
        self._reconcile(key)
        if self.operator.reports is not None:
            # What the pass decided is published: members on notice heard before it began may go on it.
            self.operator.reports.notices.looked_at(*key, began)

    def _reconcile(self, key: JobKey) -> None:
        namespace, name = key
        self.operator.counter.add("get")
        try:
            wire = as_dict(self.operator.client.get(PyTorchJobResource, name, namespace=namespace))
        except ApiError as err:
            if err.status.code == 404:
                self.operator.prometheus.forget(key)
                return  # deleted: its Pods and Services go with it (ownerReferences)
            raise
        if (wire.get("metadata") or {}).get("deletionTimestamp"):
            self.operator.prometheus.forget(key)
            return  # being deleted: the garbage collector removes its Pods and Services; creating more would fight it
        managed_by = ((wire.get("spec") or {}).get("runPolicy") or {}).get("managedBy")
        if managed_by and managed_by not in self.operator.settings.managed_by:
            self.operator.prometheus.forget(key)
            return
        try:
            job = job_from_mapping(wire, source=f"PyTorchJob {namespace}/{name}")
        except (ValidationError, JobFileError) as err:
            self._reject(wire, str(err))
            return
        before = conditions.state(job.status)
        started = time.monotonic()
        result = reconcile_once(job, self.operator.backend, self.operator.clock)
        self.operator.health.passes += 1
        after = conditions.state(result.job.status)
        self.operator.prometheus.passed(
            key, after, result.events, self.operator.clock.now(), time.monotonic() - started
        )
        if after != before:
            log.info("%s/%s: %s → %s (attempt %d)", namespace, name, before, after, result.job.status.attempt + 1)
        for event in (e for e in result.events if e.type == "Warning"):  # a repair, a hang, a lost node: worth a line
            log.info("%s/%s: %s (%s)", namespace, name, event.message, event.reason)
        if result.requeue_at is not None:
            self.operator.queue.add_after(key, (result.requeue_at - self.operator.clock.now()).total_seconds())

    def _reject(self, wire: dict[str, Any], problem: str) -> None:
        """An invalid job (one the CRD's schema let through) gets a Failed condition saying what is wrong."""
        status = JobStatus.model_validate(wire.get("status") or {})
        if conditions.is_true(status, ConditionType.FAILED):
            return
        metadata = wire["metadata"]
        cause = f"its spec is invalid: {problem}"
        now = self.operator.clock.now()
        message = conditions.fail_job(status, metadata["namespace"], metadata["name"], cause, now)
        status.last_reconcile_time = timestamp(now)
        wire_status = status.model_dump(by_alias=True, exclude_none=True, mode="json")
        self.operator.backend.patch_status(metadata["namespace"], metadata["name"], wire_status)
        self.operator.backend.emit(
            metadata["namespace"], metadata["name"], metadata.get("uid"), Event("Warning", "InvalidSpec", message)
        )
