"""Serving Kubeflow Trainer's TrainJobs on a cluster: each runs as a PyTorchJob it owns, and its status is kept in
Trainer's shape from that PyTorchJob's.

A TrainJob is read with its runtime (a ClusterTrainingRuntime or TrainingRuntime from the API server, else the
built-in ``torch-distributed``), lowered exactly as ``torchjob run`` lowers it (``api/trainjob``), and created as
a PyTorchJob of the same name whose ownerReference is the TrainJob: the operator then drives that PyTorchJob like
any other (Pods, restarts, in-place repair, hang detection), deleting the TrainJob deletes it, and its status
changes come back here through a watch of the PyTorchJobs that carry the TrainJob label. ``suspend`` is passed on
(Kueue's admission), a ``managedBy`` of MultiKueue is left alone, and a TrainJob that cannot run gets a Failed
condition saying why. Nothing is remembered between passes, as in ``controller/operator.py``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from lightkube import ALL_NS, ApiError, Client
from lightkube.types import PatchType

from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.trainjob import reading
from torchjob.api.trainjob.status import trainjob_status
from torchjob.api.trainjob.types import API_GROUP, MULTIKUEUE, RUNTIME_KIND, TRAINJOB_KIND
from torchjob.api.types import JobStatus
from torchjob.backends.kubernetes.cluster import (
    ClusterRuntimeResource,
    PyTorchJobResource,
    RuntimeResource,
    TrainJobResource,
    as_dict,
)
from torchjob.backends.kubernetes.requests import RequestCounter
from torchjob.controller.watching import JobKey
from torchjob.core.replicas import LABEL_TRAINJOB
from torchjob.core.times import timestamp

log = logging.getLogger("torchjob.operator")


def child_key(obj: dict[str, Any]) -> JobKey | None:
    """The TrainJob a PyTorchJob runs for, by its controller ownerReference."""
    meta = obj.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == TRAINJOB_KIND and str(owner.get("apiVersion", "")).startswith(API_GROUP):
            return meta.get("namespace", ""), owner.get("name", "")
    return None


class TrainJobs:
    """One TrainJob's pass: create the PyTorchJob it runs as, pass ``suspend`` on, mirror the status back."""

    def __init__(self, client: Client, counter: RequestCounter) -> None:
        self.client, self.counter = client, counter

    def installed(self) -> bool:
        """Whether the API server serves TrainJobs (Trainer's CRDs, or deploy/trainer-crds.yaml)."""
        try:
            self.counter.add("list")
            next(iter(self.client.list(TrainJobResource, namespace=ALL_NS, chunk_size=1)), None)
        except ApiError as err:
            if err.status.code == 404:
                return False
            raise
        return True

    def reconcile(self, key: JobKey) -> None:
        namespace, name = key
        wire = self._get(TrainJobResource, name, namespace)
        if wire is None or (wire.get("metadata") or {}).get("deletionTimestamp"):
            return  # gone or going: the PyTorchJob it owns goes with it
        if (wire.get("spec") or {}).get("managedBy") == MULTIKUEUE:
            return
        child = self._get(PyTorchJobResource, name, namespace)
        if child is None:
            self._create_child(wire)
            return
        uid = wire["metadata"].get("uid")
        if not any(o.get("uid") == uid for o in child["metadata"].get("ownerReferences") or []):
            self._fail(wire, f"a PyTorchJob named {name} exists and does not belong to this TrainJob; rename one")
            return
        self._pass_on_suspend(wire, child)
        previous = wire.get("status") or {}
        now = timestamp(datetime.now(timezone.utc))
        status = trainjob_status(JobStatus.model_validate(child.get("status") or {}), previous, now)
        if {k: previous.get(k) for k in status} != status:
            self._patch_status(namespace, name, status)

    def _pass_on_suspend(self, wire: dict[str, Any], child: dict[str, Any]) -> None:
        """Pass ``suspend`` on, and while the PyTorchJob has started nothing, the TrainJob's runtime patches too:
        Kueue writes its admission (the flavor's node selector and tolerations, its labels) into
        ``spec.runtimePatches`` of the suspended TrainJob just before it resumes it, as Trainer's JobSet takes
        them while suspended; the replica templates are lowered again and replaced whole, so that what Kueue
        takes back on a stop goes too."""
        namespace, name = wire["metadata"]["namespace"], wire["metadata"]["name"]
        suspend = bool((wire.get("spec") or {}).get("suspend"))
        child_spec = child.get("spec") or {}
        was_suspended = bool((child_spec.get("runPolicy") or {}).get("suspend"))
        changes: list[dict[str, Any]] = []
        if was_suspended:
            lowered = self._lowered(wire)
            replicas = (lowered or {}).get("spec", {}).get("pytorchReplicaSpecs")
            if replicas is not None and replicas != child_spec.get("pytorchReplicaSpecs"):
                changes.append({"op": "replace", "path": "/spec/pytorchReplicaSpecs", "value": replicas})
        if was_suspended != suspend:
            run_policy = {**(child_spec.get("runPolicy") or {}), "suspend": suspend}
            changes.append({"op": "add", "path": "/spec/runPolicy", "value": run_policy})
        if changes:
            self.counter.add("patch")
            self.client.patch(PyTorchJobResource, name, changes, namespace=namespace, patch_type=PatchType.JSON)

    def _lowered(self, wire: dict[str, Any]) -> dict[str, Any] | None:
        """The PyTorchJob the TrainJob runs as; None when it cannot run (its Failed condition says why)."""
        meta = wire["metadata"]
        try:
            source = f"TrainJob {meta['namespace']}/{meta['name']}"
            lowered: dict[str, Any] = reading.lower_documents([wire], source, self._runtimes(wire)).pytorchjob
        except (ValidationError, JobFileError) as err:
            self._fail(wire, str(err).replace("\n", "; "))
            return None
        return lowered

    def _create_child(self, wire: dict[str, Any]) -> None:
        meta = wire["metadata"]
        lowered = self._lowered(wire)
        if lowered is None:
            return
        lowered["metadata"]["labels"] = {**(lowered["metadata"].get("labels") or {}), LABEL_TRAINJOB: meta["name"]}
        owner = {"apiVersion": wire["apiVersion"], "kind": TRAINJOB_KIND, "name": meta["name"], "uid": meta["uid"]}
        lowered["metadata"]["ownerReferences"] = [{**owner, "controller": True, "blockOwnerDeletion": True}]
        self.counter.add("create")
        self.client.create(PyTorchJobResource.from_dict(lowered), namespace=meta["namespace"])
        log.info("%s/%s: TrainJob runs as PyTorchJob %s", meta["namespace"], meta["name"], meta["name"])

    def _runtimes(self, wire: dict[str, Any]) -> list[tuple[str, Any]]:
        """The runtime the TrainJob names, from the API server, where it is there (else the built-in one is
        looked for, and a missing runtime is named)."""
        ref = (wire.get("spec") or {}).get("runtimeRef") or {}
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
            return []  # the TrainJob's own validation names the problem
        if ref.get("kind") == RUNTIME_KIND:
            found = self._get(RuntimeResource, ref["name"], wire["metadata"]["namespace"])
        else:
            found = self._get(ClusterRuntimeResource, ref["name"], None)
        return [("", found)] if found is not None else []

    def _get(self, resource: Any, name: str, namespace: str | None) -> dict[str, Any] | None:
        self.counter.add("get")
        try:
            return as_dict(self.client.get(resource, name, namespace=namespace))
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise

    def _fail(self, wire: dict[str, Any], why: str) -> None:
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
        log.info("%s/%s: TrainJob cannot run: %s", meta["namespace"], meta["name"], why)
        self._patch_status(meta["namespace"], meta["name"], {"conditions": [*conditions, failed]})

    def _patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.counter.add("patch")
        body = {"status": status}
        self.client.patch(TrainJobResource.Status, name, body, namespace=namespace, patch_type=PatchType.MERGE)
