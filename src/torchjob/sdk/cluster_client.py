"""``ClusterClient``: PyTorchJobs on a Kubernetes cluster, driven through the API server.

The same verbs as ``torchjob.sdk.local_client.LocalClient`` (submit, get, list, logs, follow, wait, delete),
so the CLI treats both alike. Errors from the API server and its admission (schema, CEL rules, quota...)
reach the user with the server's own text, never wrapped into a generic "failed to create".
"""

from __future__ import annotations

import builtins
import queue
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import httpx
from lightkube import ApiError
from lightkube.resources.core_v1 import ConfigMap, Pod
from lightkube.types import PatchType

from torchjob.api import documents
from torchjob.api.extensions import SPARES
from torchjob.api.loading import job_from_mapping
from torchjob.api.types import PyTorchJob
from torchjob.backends.kubernetes import log_archive
from torchjob.backends.kubernetes.cluster import (
    ElasticJobResource,
    PyTorchJobResource,
    TrainJobResource,
    as_dict,
    connect,
)
from torchjob.backends.kubernetes.observing import replica_of
from torchjob.core import replicas
from torchjob.core.times import age_seconds
from torchjob.sdk.client import JobClient, scale_problem
from torchjob.sdk.errors import JobExistsError, JobNotFoundError, SdkError
from torchjob.sdk.summary import JobSummary, last_condition, progress_of, spares_shown

_FINISHED = ("Succeeded", "Failed")
_DRAIN_SECONDS = 3.0


class ClusterClient(JobClient):
    def __init__(self, namespace: str | None = None, context: str | None = None, kubeconfig: str | None = None):
        try:
            self.client = connect(kubeconfig, context, namespace)
            # Following a log waits as long as the replica is silent (a torch import, a rendezvous, a long
            # epoch): that client has no read timeout, or a quiet replica's stream would end for good.
            self.streams = connect(kubeconfig, context, namespace, timeout=httpx.Timeout(10.0, read=None))
        except Exception as err:  # noqa: BLE001 - a bad kubeconfig has many shapes; say which file and why
            raise SdkError(f"cannot connect to the cluster: {err}") from None
        self.namespace = namespace or self.client.namespace or "default"

    # -- jobs -----------------------------------------------------------------------------------------

    def submit(self, job: PyTorchJob | dict[str, Any]) -> dict[str, Any]:
        """Create the job on the cluster, in the client's namespace.

        Give the job as it was written (a mapping) to have the cluster store exactly that; a typed job is
        sent normalized, with defaults applied.
        """
        wire = job.to_wire() if isinstance(job, PyTorchJob) else dict(job)
        try:
            return self._create(PyTorchJobResource, wire)
        except ApiError as err:
            raise self._refused(f"create PyTorchJob {self.namespace}/{_name_of(wire)}", err) from None

    def submit_as_written(self, kind: str, document: dict[str, Any]) -> bool:
        """Create a TrainJob or an ElasticJob as written, where the cluster serves its kind (False where it does
        not: no CRD); the operator runs it as a PyTorchJob it owns."""
        resource = {"TrainJob": TrainJobResource, "ElasticJob": ElasticJobResource}[kind]
        try:
            self._create(resource, document)
        except ApiError as err:
            if err.status.code == 404:
                return False
            raise self._refused(f"create {kind} {self.namespace}/{_name_of(document)}", err) from None
        return True

    def _create(self, resource: Any, document: dict[str, Any]) -> dict[str, Any]:
        """Create ``document`` as written, less its status and the metadata only the API server sets; a name
        in use is ``JobExistsError``, any other refusal the API server's error."""
        wire = documents.without_status(document)[0]
        keep = ("name", "labels", "annotations")
        wire["metadata"] = {k: v for k, v in (document.get("metadata") or {}).items() if k in keep}
        try:
            return dict(self.client.create(resource.from_dict(wire), namespace=self.namespace))
        except ApiError as err:
            if err.status.code == 409:
                raise JobExistsError(_name_of(document), "on the cluster") from None
            raise

    def get_wire(self, name: str) -> dict[str, Any]:
        try:
            return dict(self.client.get(PyTorchJobResource, name, namespace=self.namespace))
        except ApiError as err:
            if err.status.code == 404:
                raise JobNotFoundError(name) from None
            raise self._refused(f"get PyTorchJob {self.namespace}/{name}", err) from None

    def list(self) -> builtins.list[JobSummary]:
        try:
            items = [dict(j) for j in self.client.list(PyTorchJobResource, namespace=self.namespace)]
        except ApiError as err:
            raise self._refused(f"list PyTorchJobs in {self.namespace}", err) from None
        now = datetime.now(timezone.utc)
        summaries = []
        for wire in items:
            status = wire.get("status") or {}
            annotations = wire["metadata"].get("annotations") or {}
            last = last_condition(wire)
            summaries.append(
                JobSummary(
                    name=wire["metadata"]["name"],
                    state=last.get("type", ""),
                    age_seconds=age_seconds(wire["metadata"].get("creationTimestamp"), now),
                    attempt=status.get("attempt", 0),
                    restarts=status.get("restartCount", 0),
                    message=last.get("message", ""),
                    progress=progress_of(wire),
                    repairs=status.get("repairs", 0),
                    spares=spares_shown(annotations.get(SPARES), status.get("sparesReady", 0)),
                )
            )
        return summaries

    def state(self, name: str) -> str:
        return str(last_condition(self.get_wire(name)).get("type", ""))

    def wait(self, name: str, timeout: float | None = None, poll: float = 1.0) -> dict[str, Any]:
        """Block until the job Succeeded or Failed; the job as it ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wire = self.get_wire(name)
            conditions = (wire.get("status") or {}).get("conditions") or []
            if any(c["type"] in _FINISHED and c["status"] == "True" for c in conditions):
                return wire
            if deadline is not None and time.monotonic() > deadline:
                raise SdkError(f"job {name!r} did not finish within {timeout:.0f}s")
            time.sleep(poll)

    def scale(self, name: str, workers: int) -> None:
        """Set a running elastic job's Worker count; the operator starts or stops Workers to match."""
        wire = self.get_wire(name)
        problem = scale_problem(job_from_mapping(wire), workers)
        if problem:
            raise SdkError(problem)
        # A PyTorchJob an ElasticJob runs as takes its Worker count from the ElasticJob: that one is scaled.
        owner = next((o for o in wire["metadata"].get("ownerReferences") or [] if o.get("kind") == "ElasticJob"), None)
        resource, kind = (ElasticJobResource, "ElasticJob") if owner else (PyTorchJobResource, "PyTorchJob")
        field = "replicaSpecs" if owner else "pytorchReplicaSpecs"
        patch = {"spec": {field: {"Worker": {"replicas": workers}}}}
        try:
            self.client.patch(resource, name, patch, namespace=self.namespace, patch_type=PatchType.MERGE)
        except ApiError as err:
            raise self._refused(f"scale {kind} {self.namespace}/{name}", err) from None

    def delete(self, name: str) -> None:
        try:
            self.client.delete(PyTorchJobResource, name, namespace=self.namespace)
        except ApiError as err:
            if err.status.code == 404:
                raise JobNotFoundError(name) from None
            raise self._refused(f"delete PyTorchJob {self.namespace}/{name}", err) from None

    # -- logs -----------------------------------------------------------------------------------------

    def pods(self, name: str) -> builtins.list[dict[str, Any]]:
        """The job's Pods, Master first."""
        selector: dict[str, Any] = {replicas.LABEL_JOB_NAME: name}
        pods = [as_dict(p) for p in self.client.list(Pod, namespace=self.namespace, labels=selector)]
        return sorted(pods, key=_replica_order)

    def logs(self, name: str, replica: str | None = None, attempt: int | None = None) -> str:
        """What the replicas printed so far, each line prefixed ``[replica]`` unless one replica is asked for."""
        wire = self.get_wire(name)  # a clear "not found" rather than an empty answer
        if replica is not None:
            problem = replicas.unknown_replica_problem(job_from_mapping(wire), replica)
            if problem:
                raise SdkError(problem)
        out: builtins.list[str] = []
        found = False
        for pod in self.pods(name):
            identity = replica_of(pod)
            if identity is None or (attempt is not None and identity[1] != attempt):
                continue
            found = True
            if replica and str(identity[0]) != replica:
                continue
            for line in self._pod_log(pod):
                out.append(line if replica else f"[{identity[0]}] {line}")
        if attempt is not None and not found:
            # That attempt's Pods are gone: its output was kept when they were deleted (log_archive.py).
            for kept_replica, text in self._kept_logs(name, attempt).items():
                if replica and kept_replica != replica:
                    continue
                out += [line if replica else f"[{kept_replica}] {line}" for line in text.splitlines()]
        return "\n".join(out)

    def _kept_logs(self, name: str, attempt: int) -> dict[str, str]:
        try:
            kept = as_dict(
                self.client.get(ConfigMap, log_archive.archive_name(name, attempt), namespace=self.namespace)
            )
        except ApiError as err:
            if err.status.code == 404:
                raise SdkError(
                    f"job {name!r} has no Pods of attempt {attempt} and no output kept for it (attempts are "
                    "numbered from 0, as status.attempt; the output of an attempt is kept when its Pods are deleted)"
                ) from None
            raise self._refused(f"read ConfigMap {log_archive.archive_name(name, attempt)}", err) from None
        return log_archive.read(kept)

    def follow(self, name: str, replica: str | None = None, poll: float = 1.0) -> Iterator[tuple[str, str]]:
        """Stream every replica's lines as they come, across group restarts, until the job has finished.

        Pods still Pending are waited for (their logs start once they run), so following a job just
        submitted shows its first lines instead of nothing.
        """
        lines: queue.Queue[tuple[str, str]] = queue.Queue()
        followed: set[str] = set()
        streams: builtins.list[threading.Thread] = []
        finished_at: float | None = None
        while True:
            for pod in self.pods(name):
                identity = replica_of(pod)
                uid = pod["metadata"].get("uid", "")
                phase = (pod.get("status") or {}).get("phase", "Pending")
                if identity is None or uid in followed or phase == "Pending":
                    continue
                if replica and str(identity[0]) != replica:
                    continue
                followed.add(uid)
                thread = threading.Thread(
                    target=self._stream, args=(pod, str(identity[0]), lines), daemon=True, name=f"logs-{uid}"
                )
                thread.start()
                streams.append(thread)
            if finished_at is None and self.state(name) in _FINISHED:
                finished_at = time.monotonic()
            deadline = time.monotonic() + poll
            while time.monotonic() < deadline:
                try:
                    yield lines.get(timeout=max(deadline - time.monotonic(), 0.01))
                except queue.Empty:
                    break
            # Once the job has ended, streams get a moment to drain; Pods kept running by cleanPodPolicy
            # None would otherwise hold the follower forever.
            drained = not any(t.is_alive() for t in streams)
            if finished_at is not None and (drained or time.monotonic() - finished_at > _DRAIN_SECONDS):
                while not lines.empty():
                    yield lines.get_nowait()
                return

    def _stream(self, pod: dict[str, Any], replica: str, lines: queue.Queue[tuple[str, str]]) -> None:
        try:
            for line in self.streams.log(pod["metadata"]["name"], namespace=self.namespace, follow=True):
                lines.put((replica, line.rstrip("\n")))
        except (ApiError, httpx.HTTPError):  # the Pod went away (group restart, cleanup), or the connection dropped:
            return  # this stream ends, never the follower; a successor Pod gets a stream of its own

    def _pod_log(self, pod: dict[str, Any]) -> builtins.list[str]:
        try:
            return [line.rstrip("\n") for line in self.client.log(pod["metadata"]["name"], namespace=self.namespace)]
        except ApiError:
            return []  # not started yet, or already gone

    def _refused(self, what: str, err: ApiError) -> SdkError:
        return SdkError(f"cannot {what}: {err.status.message or err}")


def _replica_order(pod: dict[str, Any]) -> tuple[Any, ...]:
    identity = replica_of(pod)
    return (0, identity[0], identity[1]) if identity else (1, pod["metadata"]["name"])


def _name_of(document: dict[str, Any]) -> str:
    return str((document.get("metadata") or {}).get("name", ""))
