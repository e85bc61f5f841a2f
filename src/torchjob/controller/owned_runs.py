"""Jobs of another kind that the operator runs as a PyTorchJob each owns (a TrainJob, an ElasticJob).

Each kind is read and lowered exactly as ``torchjob run`` lowers it (``api/trainjob``, ``api/elasticjob``), and
created as a PyTorchJob of the same name whose controller ownerReference is the job: the operator then drives that
PyTorchJob like any other (Pods, restarts, in-place repair, hang detection), deleting the job deletes it, and its
status changes come back through a watch of the PyTorchJobs that carry the kind's label. A kind says how it is
lowered, what of its spec it passes on to a running PyTorchJob (``suspend``, a scale), and how its status is
written back in its own shape; a job that cannot run gets a Failed condition saying why. Nothing is remembered
between passes, as in ``controller/operator.py``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from datetime import datetime, timezone
from typing import Any

from lightkube import ALL_NS, ApiError, Client
from lightkube.types import PatchType

from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.types import JobStatus
from torchjob.backends.kubernetes.cluster import JobKey, PyTorchJobResource, as_dict
from torchjob.backends.kubernetes.requests import RequestCounter
from torchjob.core.times import timestamp

log = logging.getLogger("torchjob.operator")


class OwnedRuns(ABC):
    """One kind's pass: create the PyTorchJob a job runs as, pass its spec's changes on, mirror the status back."""

    kind: str  # ElasticJob
    group: str  # elastic.pytorch.org
    resource: Any  # its lightkube resource
    label: str  # the label on the PyTorchJob that runs one: the job's name

    def __init__(self, client: Client, counter: RequestCounter) -> None:
        self.client, self.counter = client, counter

    # -- what a kind says -----------------------------------------------------------------------------

    @abstractmethod
    def lower(self, wire: dict[str, Any]) -> dict[str, Any]:
        """The PyTorchJob mapping ``wire`` runs as; ValidationError or JobFileError when it cannot run."""

    @abstractmethod
    def status(self, child: JobStatus, previous: dict[str, Any], now: str) -> dict[str, Any]:
        """The job's status in its own shape, from the PyTorchJob's."""

    def changes(self, wire: dict[str, Any], child: dict[str, Any]) -> list[dict[str, Any]]:
        """JSON patch operations that pass the job's spec on to the PyTorchJob it runs as (none by default)."""
        return []

    def skipped(self, wire: dict[str, Any]) -> bool:
        """A job another controller runs (a TrainJob MultiKueue dispatches)."""
        return False

    # -- the pass -------------------------------------------------------------------------------------

    def installed(self) -> bool:
        """Whether the API server serves the kind (its CRD is applied)."""
        try:
            self.counter.add("list")
            next(iter(self.client.list(self.resource, namespace=ALL_NS, chunk_size=1)), None)
        except ApiError as err:
            if err.status.code == 404:
                return False
            raise
        return True

    def child_key(self, obj: dict[str, Any]) -> JobKey | None:
        """The job a PyTorchJob runs for, by its controller ownerReference."""
        meta = obj.get("metadata") or {}
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == self.kind and str(owner.get("apiVersion", "")).startswith(self.group):
                return meta.get("namespace", ""), owner.get("name", "")
        return None

    def reconcile(self, key: JobKey) -> None:
        namespace, name = key
        wire = self.get(self.resource, name, namespace)
        if wire is None or (wire.get("metadata") or {}).get("deletionTimestamp"):
            return  # gone or going: the PyTorchJob it owns goes with it
        if self.skipped(wire):
            return
        child = self.get(PyTorchJobResource, name, namespace)
        if child is None:
            self._create_child(wire)
            return
        uid = wire["metadata"].get("uid")
        if not any(o.get("uid") == uid for o in child["metadata"].get("ownerReferences") or []):
            self.fail(wire, f"a PyTorchJob named {name} exists and does not belong to this {self.kind}; rename one")
            return
        patches = self.changes(wire, child)
        if patches:
            self.counter.add("patch")
            self.client.patch(PyTorchJobResource, name, patches, namespace=namespace, patch_type=PatchType.JSON)
        previous = wire.get("status") or {}
        now = timestamp(datetime.now(timezone.utc))
        status = self.status(JobStatus.model_validate(child.get("status") or {}), previous, now)
        if {k: previous.get(k) for k in status} != status:
            self._patch_status(namespace, name, status)

    def lowered(self, wire: dict[str, Any]) -> dict[str, Any] | None:
        """The PyTorchJob the job runs as; None when it cannot run (its Failed condition says why)."""
        try:
            return self.lower(wire)
        except (ValidationError, JobFileError) as err:
            self.fail(wire, str(err).replace("\n", "; "))
            return None

    def _create_child(self, wire: dict[str, Any]) -> None:
        meta = wire["metadata"]
        lowered = self.lowered(wire)
        if lowered is None:
            return
        lowered["metadata"]["labels"] = {**(lowered["metadata"].get("labels") or {}), self.label: meta["name"]}
        owner = {"apiVersion": wire["apiVersion"], "kind": self.kind, "name": meta["name"], "uid": meta["uid"]}
        lowered["metadata"]["ownerReferences"] = [{**owner, "controller": True, "blockOwnerDeletion": True}]
        self.counter.add("create")
        self.client.create(PyTorchJobResource.from_dict(lowered), namespace=meta["namespace"])
        log.info("%s/%s: %s runs as PyTorchJob %s", meta["namespace"], meta["name"], self.kind, meta["name"])

    def get(self, resource: Any, name: str, namespace: str | None) -> dict[str, Any] | None:
        self.counter.add("get")
        try:
            return as_dict(self.client.get(resource, name, namespace=namespace))
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise

    def fail(self, wire: dict[str, Any], why: str) -> None:
        conditions = (wire.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions):
            return
        now = timestamp(datetime.now(timezone.utc))
        failed = {
            "type": "Failed",
            "status": "True",
            "reason": "InvalidSpec",
            "message": why,
            "lastTransitionTime": now,
        }
        meta = wire["metadata"]
        log.info("%s/%s: %s cannot run: %s", meta["namespace"], meta["name"], self.kind, why)
        self._patch_status(meta["namespace"], meta["name"], {"conditions": [*conditions, failed]})

    def _patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.counter.add("patch")
        body = {"status": status}
        self.client.patch(self.resource.Status, name, body, namespace=namespace, patch_type=PatchType.MERGE)
