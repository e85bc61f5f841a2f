"""The Kubernetes backend: replicas are Pods (each with a headless Service) owned by the PyTorchJob object.

It keeps no state between passes. Pod names are deterministic, so creating one that already exists is a
no-op (409 AlreadyExists): an operator killed between "create" and "write status" converges on restart
without ever making a duplicate. Status goes to the ``status`` subresource with a merge patch, once per pass
and only when it changed; events are ``core/v1`` Events on the job, so ``kubectl describe`` shows them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import threading
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import httpx
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import ConfigMap, Node, Pod, Service
from lightkube.resources.core_v1 import Event as KubeEvent
from lightkube.types import PatchType

from torchjob.api import extensions
from torchjob.api.types import DEFAULT_CONTAINER_NAME, PyTorchJob
from torchjob.backends.base import Backend
from torchjob.backends.kubernetes import crd, log_archive, mapping, observing
from torchjob.backends.kubernetes.cluster import PyTorchJobResource, as_dict
from torchjob.backends.kubernetes.reports import ReportBoard
from torchjob.core import replicas
from torchjob.core.actions import (
    Action,
    CreateRendezvousStore,
    CreateReplica,
    DeleteJob,
    DeleteRendezvousStore,
    DeleteReplica,
    Event,
)
from torchjob.core.observed import Observed, Phase, ReplicaObservation
from torchjob.core.times import timestamp

COMPONENT = "torchjob-operator"


class RequestCounter:
    """How many API requests the operator made, by verb (reported by bench/)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_verb: Counter[str] = Counter()

    def add(self, verb: str) -> None:
        with self._lock:
            self.by_verb[verb] += 1

    @property
    def total(self) -> int:
        return sum(self.by_verb.values())


class KubernetesBackend(Backend):
    """One per operator: carries out plans against the API server for every job it reconciles."""

    # Pods resolve a job's rdzvHost through the cluster's DNS.
    reaches_rdzv_host = True
    # Not yet: spare Pods and the membership channel into running Pods are still to be built.
    repairs_in_place = False

    def __init__(
        self,
        client: Client,
        counter: RequestCounter | None = None,
        reports: ReportBoard | None = None,
        report_url: str | None = None,
    ) -> None:
        """``reports``/``report_url``: the operator's report board and the URL Pods send progress to (both
        None when the operator serves no report endpoint: then no hang can be detected on this cluster)."""
        self.client = client
        self.counter = counter or RequestCounter()
        self.reports = reports
        self.report_url = report_url
        # The Pods seen by the last observe(), by name: deletes check they remove the attempt they mean.
        self._pods: dict[str, dict[str, Any]] = {}

    # -- Backend --------------------------------------------------------------------------------------

    def observe(self, job: PyTorchJob) -> Observed:
        self.counter.add("list")
        selector: dict[str, Any] = {replicas.LABEL_JOB_NAME: job.name, replicas.LABEL_OPERATOR: replicas.OPERATOR_NAME}
        pods = [as_dict(p) for p in self.client.list(Pod, namespace=job.namespace, labels=selector)]
        # Only Pods this job object owns: a job deleted and created again under the same name starts afresh.
        owned = [p for p in pods if _owned_by(p, job.metadata.uid)]
        self._pods = {p["metadata"]["name"]: p for p in owned}
        in_doubt = {observing.node_in_doubt(p) for p in owned} - {None}
        nodes = {name: self._node(name) for name in in_doubt if name}
        observations = [
            self._with_progress(observing.observe_pod(p, nodes.get(p.get("spec", {}).get("nodeName", ""))), p)
            for p in owned
        ]
        store = self._pods.get(mapping.store_name(job))
        store_running = store is not None and store["metadata"].get("deletionTimestamp") is None
        return Observed([o for o in observations if o is not None], store_running=store_running)

    @property
    def reports_progress(self) -> bool:  # type: ignore[override]
        return self.reports is not None and self.report_url is not None

    def _with_progress(self, seen: ReplicaObservation | None, pod: dict[str, Any]) -> ReplicaObservation | None:
        """A running replica with the progress its Pod last reported (filed by Pod uid, see reports.py)."""
        if seen is None or self.reports is None or seen.phase is not Phase.RUNNING:
            return seen
        progress = self.reports.latest(pod["metadata"].get("uid"))
        return dataclasses.replace(seen, progress=progress) if progress else seen

    def _node(self, name: str) -> dict[str, Any] | None:
        """The Node a running Pod that is not Ready sits on (its kubelet may have stopped reporting)."""
        self.counter.add("get")
        try:
            return as_dict(self.client.get(Node, name))
        except ApiError:
            return None  # deleted, or not readable: the Pod says what it says

    def execute(self, job: PyTorchJob, actions: list[Action]) -> None:
        self._keep_logs(job, [a for a in actions if isinstance(a, DeleteReplica)])
        for action in actions:
            if isinstance(action, CreateRendezvousStore):
                self._create(mapping.store_service_manifest(job), Service)
                self._create(mapping.store_pod_manifest(job), Pod)
            elif isinstance(action, DeleteRendezvousStore):
                self._delete(Pod, mapping.store_name(job), job.namespace)
                self._delete(Service, mapping.store_name(job), job.namespace)
            elif isinstance(action, CreateReplica):
                self._create(mapping.service_manifest(job, action.replica), Service)
                self._create(mapping.pod_manifest(job, action.replica, action.attempt, self.report_url), Pod)
            elif isinstance(action, DeleteReplica):
                self._delete_pod(job, action)
            elif isinstance(action, DeleteJob):
                self.counter.add("delete")
                with contextlib.suppress(ApiError):
                    self.client.delete(PyTorchJobResource, job.name, namespace=job.namespace)

    def record_status(self, job: PyTorchJob) -> None:
        self.patch_status(job.namespace, job.name, job.to_wire()["status"])

    def publish(self, job: PyTorchJob, events: list[Event]) -> None:
        for event in events:
            self.emit(job.namespace, job.name, job.metadata.uid, event)

    # -- helpers --------------------------------------------------------------------------------------

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.counter.add("patch")
        self.client.patch(
            PyTorchJobResource.Status, name, {"status": status}, namespace=namespace, patch_type=PatchType.MERGE
        )

    def emit(self, namespace: str, name: str, uid: str | None, event: Event) -> None:
        """A ``core/v1`` Event on the job (best effort: a pass never fails over one)."""
        now = timestamp(datetime.now(timezone.utc))
        body = KubeEvent.from_dict(  # type: ignore[no-untyped-call]
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": namespace},
                "involvedObject": {
                    "apiVersion": f"{crd.GROUP}/{crd.VERSION}",
                    "kind": crd.KIND,
                    "name": name,
                    "namespace": namespace,
                    "uid": uid,
                },
                "type": event.type,
                "reason": event.reason,
                "message": event.message[:1024],
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )
        self.counter.add("create")
        with contextlib.suppress(ApiError):
            self.client.create(body, namespace=namespace)

    def _create(self, manifest: dict[str, Any], kind: type[Any]) -> None:
        self.counter.add("create")
        try:
            self.client.create(kind.from_dict(manifest), namespace=manifest["metadata"]["namespace"])
        except ApiError as err:
            if err.status.code != 409:  # AlreadyExists: an earlier pass (or operator) made it
                raise

    def _delete(self, kind: type[Any], name: str, namespace: str) -> None:
        self.counter.add("delete")
        with contextlib.suppress(ApiError):
            self.client.delete(kind, name, namespace=namespace)

    def _keep_logs(self, job: PyTorchJob, deletes: list[DeleteReplica]) -> None:
        """File the output of the Pods about to be deleted in their attempt's ConfigMap (log_archive.py)."""
        by_attempt: dict[int, dict[str, str]] = {}
        for action in deletes:
            pod = self._pods.get(action.replica.pod_name(job.name))
            identity = observing.replica_of(pod) if pod else None
            if pod is None or identity is None or identity[1] != action.attempt or not _has_run(pod):
                continue
            text = self._pod_log(job, pod)
            if text is not None:
                by_attempt.setdefault(action.attempt, {})[str(action.replica)] = text
        for attempt, logs in by_attempt.items():
            kept = log_archive.manifest(job, attempt, logs)
            self.counter.add("create")
            try:
                self.client.create(ConfigMap.from_dict(kept), namespace=job.namespace)  # type: ignore[no-untyped-call]
            except ApiError as err:
                if err.status.code != 409:
                    continue  # best effort: losing old output must never stop a restart
                self.counter.add("patch")  # an earlier pass kept other replicas of this attempt
                with contextlib.suppress(ApiError):
                    name = kept["metadata"]["name"]
                    patch = {"binaryData": kept["binaryData"]}
                    self.client.patch(ConfigMap, name, patch, namespace=job.namespace, patch_type=PatchType.MERGE)

    def _pod_log(self, job: PyTorchJob, pod: dict[str, Any]) -> str | None:
        self.counter.add("get")
        try:
            lines = self.client.log(
                pod["metadata"]["name"],
                namespace=job.namespace,
                container=DEFAULT_CONTAINER_NAME,
                tail_lines=log_archive.TAIL_LINES,
            )
            return "".join(lines)
        except (ApiError, httpx.HTTPError):
            return None  # no container ever ran, or the node is gone: nothing to keep

    def _delete_pod(self, job: PyTorchJob, action: DeleteReplica) -> None:
        name = action.replica.pod_name(job.name)
        pod = self._pods.get(name)
        identity = observing.replica_of(pod) if pod else None
        if identity is None or identity[1] != action.attempt:
            return  # already gone, or the name now belongs to another attempt
        grace = job.annotation(extensions.TERMINATION_GRACE)
        self.counter.add("delete")
        with contextlib.suppress(ApiError):
            self.client.delete(
                Pod,
                name,
                namespace=job.namespace,
                grace_period=int(float(grace)) if grace is not None else None,
            )
        if action.final:
            # The job is over: its Services go with its Pods (under cleanPodPolicy, as Kubeflow does).
            self._delete(Service, name, job.namespace)


def _owned_by(pod: dict[str, Any], uid: str | None) -> bool:
    return any(ref.get("uid") == uid for ref in pod.get("metadata", {}).get("ownerReferences") or [])


def _has_run(pod: dict[str, Any]) -> bool:
    """Whether a container of the Pod has started (only then is there output to keep)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any((s.get("state") or {}).keys() & {"running", "terminated"} for s in statuses)
