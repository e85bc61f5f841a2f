"""The Kubernetes backend: replicas are Pods (each with a headless Service) owned by the PyTorchJob object.

It keeps no decision between passes, only each job's last list of Pods while nothing says they changed
(``pod_listings.py``). Pod names are deterministic, so creating one that already exists is a
no-op (409 AlreadyExists): an operator killed between "create" and "write status" converges on restart
without ever making a duplicate. Status goes to the ``status`` subresource with a merge patch, once per pass
and only when it changed; events are ``core/v1`` Events on the job, so ``kubectl describe`` shows them.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import ConfigMap, Pod, Service
from lightkube.resources.core_v1 import Event as KubeEvent
from lightkube.types import PatchType
from typing_extensions import assert_never

from torchjob.api import extensions
from torchjob.api.types import PyTorchJob
from torchjob.backends.base import Backend
from torchjob.backends.kubernetes import autoreport_boot, events, fanout, mapping, observing, stuck_pods, warm_pods
from torchjob.backends.kubernetes import spares as spares_mapping
from torchjob.backends.kubernetes.cluster import PyTorchJobResource, as_dict
from torchjob.backends.kubernetes.log_keeper import LogKeeper
from torchjob.backends.kubernetes.nodes import NodeReader
from torchjob.backends.kubernetes.pod_listings import PodListings
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.backends.kubernetes.requests import RequestCounter
from torchjob.backends.kubernetes.warm_restarts import WarmRestarts
from torchjob.core import replicas
from torchjob.core.actions import (
    Action,
    CreateRendezvousStore,
    CreateReplica,
    CreateSpare,
    DeleteJob,
    DeleteRendezvousStore,
    DeleteReplica,
    DeleteSpare,
    DeleteStuckPod,
    Event,
    LeaveGroup,
    ReformGroup,
    ReorderStop,
    RepairReplica,
    RestartWarm,
)
from torchjob.core.observed import Observed, Platform
from torchjob.core.replicas import ReplicaId
from torchjob.core.reported import Progress

# Pods per list request: a page's response is held while it is parsed, not the whole job's (some 10 MB at 1,024).
PODS_PER_PAGE = 250


class KubernetesBackend(Backend):
    """One per operator: carries out plans against the API server for every job it reconciles."""

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
        self.nodes = NodeReader(client, self.counter.add)
        self.logs = LogKeeper(client, self.counter.add, lambda: self.nodes.avoided_now())
        self.reports = reports
        self.report_url = report_url
        self.warm = WarmRestarts(client, reports, self.counter.add, self.logs) if reports is not None else None
        # The CA Pods verify an https report endpoint with (set by the operator once it serves one).
        self.report_ca: str | None = None
        # The Pods this pass's observe() saw, by name: deletes check they remove the attempt they mean. Per thread:
        # the operator's workers reconcile several jobs at once through this one backend, and a pass's execute()
        # must act on its own job's Pods.
        self._pass = threading.local()
        # The jobs (by uid) whose autoreport ConfigMap this operator made or found.
        self._booted: set[str] = set()
        # Each job's last list of Pods, reused while the operator's Pod watch says nothing changed.
        self.listings = PodListings()

    @property
    def _pods(self) -> dict[str, dict[str, Any]]:
        """The Pods this thread's last observe() saw (the job of the pass in progress)."""
        pods: dict[str, dict[str, Any]] = getattr(self._pass, "pods", {})
        return pods

    # -- Backend --------------------------------------------------------------------------------------

    def observe(self, job: PyTorchJob) -> Observed:
        # Only Pods this job object owns: a job deleted and created again under the same name starts afresh.
        owned = [p for p in self._read_pods(job) if _owned_by(p, job.metadata.uid)]
        self._pass.pods = {p["metadata"]["name"]: p for p in owned}
        served = self.reports.membership(job.namespace, job.name, job.metadata.uid or "") if self.reports else None
        published = None if served is None else (served["attempt"], served["generation"])
        unordered = warm_pods.unordered_stops(self.reports, owned) if self.reports is not None else []
        # Every Pod's node, the store's and spares' too: one left on a silent node must go by force.
        nodes, silent = self.nodes.for_pods(owned, self._progress_of, lambda p: observing.member_of(self.reports, p))
        stuck, owned = stuck_pods.find_stuck(owned, silent, self.nodes.avoided_now(), mapping.store_name(job))
        observations = []
        for pod in owned:
            name = (pod.get("spec") or {}).get("nodeName", "")
            found = observing.observe_pod(pod, nodes.get(name), silent.get(name))
            heard = warm_pods.with_trainer(self.reports, observing.with_reports(self.reports, found, pod), pod)
            observations.append(self.warm.with_last_lines(job, heard, pod) if self.warm is not None else heard)
        store = next((p for p in owned if p["metadata"]["name"] == mapping.store_name(job)), None)
        store_running = store is not None and store["metadata"].get("deletionTimestamp") is None
        spares = [
            observing.observe_spare(self.reports, p) for p in owned if observing.role_of(p) == replicas.ROLE_SPARE
        ]
        seen = observing.one_per_replica([o for o in observations if o is not None])
        ready = [s for s in spares if s is not None]
        return Observed(
            seen,
            store_running=store_running,
            spares=ready,
            published_membership=published,
            stuck=stuck,
            unordered_stops=unordered,
        )

    @property
    def platform(self) -> Platform:
        # Pods resolve a job's rdzvHost through the cluster's DNS; they run on nodes that can vanish (the node-loss
        # witnesses name a silent one's fate). Progress is heard only where the operator serves a report endpoint,
        # and spare Pods need it too: they announce themselves and learn the membership there.
        hears = self.reports is not None and self.report_url is not None
        return Platform(reaches_rdzv_host=True, repairs_in_place=hears, reports_progress=hears, one_host=False)

    def end_pass(self) -> None:
        """Forget the Pods this thread's pass read: each worker thread would otherwise hold its last job's Pods
        (about 45 kB each as parsed JSON) until its next pass, whatever job that is."""
        self._pass.pods = {}

    def _read_pods(self, job: PyTorchJob) -> list[dict[str, Any]]:
        """The job's Pods: listed again only when they may have changed since the last list (``pod_listings``)."""
        return self.listings.pods((job.namespace, job.name), functools.partial(self._list_pods, job))

    def _list_pods(self, job: PyTorchJob) -> list[dict[str, Any]]:
        """The job's Pods, a page of them per request, each without what is never read here: its managedFields
        (the API server's record of who set which field) and its spec but for its node (containers, volumes,
        tolerations: three quarters of a parsed Pod). A job of a thousand replicas never has its whole list's
        response in memory, and what is kept of its Pods between passes (``pod_listings``) is some 7 MB."""
        selector: dict[str, Any] = {replicas.LABEL_JOB: job.name, replicas.LABEL_OPERATOR: replicas.OPERATOR_NAME}
        pods = []
        for listed in self.client.list(Pod, namespace=job.namespace, labels=selector, chunk_size=PODS_PER_PAGE):
            pod = as_dict(listed)
            (pod.get("metadata") or {}).pop("managedFields", None)
            node = (pod.get("spec") or {}).get("nodeName")
            pod["spec"] = {"nodeName": node} if node else {}
            pods.append(pod)
        # A request per page; lightkube's iterator does not show its pages, so they are counted from the Pods.
        self.counter.add("list", max(1, -(-len(pods) // PODS_PER_PAGE)))
        return pods

    def _progress_of(self, pod: dict[str, Any]) -> Progress | None:
        return self.reports.latest(pod["metadata"].get("uid")) if self.reports is not None else None

    def execute(self, job: PyTorchJob, actions: list[Action]) -> None:
        if actions:  # what the next pass reads must show them: it lists again
            self.listings.changed((job.namespace, job.name))
        if self.reports is not None:
            self.reports.forget_other_jobs_membership(job.namespace, job.name, job.metadata.uid or "")
        deleting = [a for a in actions if isinstance(a, DeleteReplica)]
        self._keep_logs(job, deleting)
        # Pods removed while running (lost to silence, a hang): what replaces them prefers other nodes.
        leaving = [a for a in actions if isinstance(a, DeleteReplica | RepairReplica)]
        self.nodes.suspect([pod for a in leaving for pod in [self._pod_of(a.replica, a.attempt)] if pod is not None])
        taken = set(self._pods)  # Pod names in use, with the spares this pass creates
        lost: list[tuple[RepairReplica, dict[str, Any]]] = []
        deletes: list[DeleteReplica] = []  # a run of them, made side by side (a group restart deletes every replica)
        for action in actions:
            if deletes and not isinstance(action, DeleteReplica):
                self._delete_replicas(job, deletes)
                deletes = []
            match action:
                case CreateRendezvousStore():
                    self._create(mapping.store_service_manifest(job), Service)
                    store = mapping.store_pod_manifest(job)
                    self.nodes.keep_off_silent(store)
                    self._create(store, Pod)
                case DeleteRendezvousStore():
                    self._delete(Pod, mapping.store_name(job), job.namespace)
                    self._delete(Service, mapping.store_name(job), job.namespace)
                case CreateReplica():
                    self._autoreport(job)
                    self._create(mapping.service_manifest(job, action.replica), Service)
                    waiting = self._pods.get(action.replica.pod_name(job.name))
                    if self.warm is not None and self.warm.start(job, waiting, action.replica, action.attempt):
                        continue  # its Pod is there, waiting: its launcher starts the attempt
                    pod = mapping.pod_manifest(
                        job, action.replica, action.attempt, self.report_url, action.rendezvous_at_store, self.report_ca
                    )
                    self.nodes.keep_off_silent(pod)
                    self._create(spares_mapping.with_store(pod, job) if action.meets_at_store else pod, Pod)
                case CreateSpare():
                    self._autoreport(job)
                    name = spares_mapping.free_spare_name(job, action.attempt, taken)
                    spare = spares_mapping.spare_pod_manifest(
                        job, name, action.attempt, self.report_url, action.rendezvous_at_store, self.report_ca
                    )
                    self.nodes.keep_off_silent(spare)
                    self._create(spare, Pod)
                case DeleteSpare():
                    self._delete(Pod, action.name, job.namespace, grace_period=spares_mapping.SPARE_GRACE_SECONDS)
                case RepairReplica():
                    lost_pod = self._promote(job, action)
                    if lost_pod is not None:
                        lost.append((action, lost_pod))
                case ReformGroup():
                    self._reform(job, action)
                case DeleteReplica():
                    deletes.append(action)
                case RestartWarm():
                    restarting = self._pod_of(action.replica, action.attempt)
                    if self.warm is not None and restarting is not None:  # else the next pass creates it
                        self.warm.restart(job, restarting, action.replica, action.next_attempt, action.at_once)
                case DeleteStuckPod():
                    self._delete(Pod, action.name, job.namespace, grace_period=0)
                case ReorderStop():
                    stopping = self._pod_of(action.replica, action.attempt)
                    if self.reports is not None and stopping is not None:
                        addressing = mapping.addressing(job, action.attempt, at_store=False)
                        warm_pods.order_stop_again(self.reports, job, stopping, action, addressing)
                case LeaveGroup():
                    survivor = self._pod_of(action.replica, action.attempt)
                    if self.reports is not None and survivor is not None:  # its processes hear it at their next beat
                        self.reports.order_leave(survivor["metadata"]["uid"], action.why)
                case DeleteJob():
                    self._delete(PyTorchJobResource, job.name, job.namespace)
                case _:
                    assert_never(action)
        self._delete_replicas(job, deletes)
        for repaired, lost_pod in lost:  # once the group was told its next membership: keeping logs takes time
            self._drop_lost(job, repaired, lost_pod)

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
        manifest = events.event_manifest(namespace, name, uid, event, datetime.now(timezone.utc))
        body = KubeEvent.from_dict(manifest)  # type: ignore[no-untyped-call]
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

    def _autoreport(self, job: PyTorchJob) -> None:
        """The ConfigMap the Pods mount for autoreport_boot.py, once per job (the job owns it)."""
        if self.report_url is None or not autoreport_boot.wanted(job) or job.metadata.uid in self._booted:
            return
        self._create(autoreport_boot.config_map(job, mapping.owner_reference(job)), ConfigMap)
        self._booted.add(str(job.metadata.uid))

    def _delete(self, kind: type[Any], name: str, namespace: str, grace_period: int | None = None) -> None:
        self.counter.add("delete")
        with contextlib.suppress(ApiError):
            self.client.delete(kind, name, namespace=namespace, grace_period=grace_period)

    def _promote(self, job: PyTorchJob, action: RepairReplica) -> dict[str, Any] | None:
        """The spare becomes the replica (its labels, its place in the group). Returns the lost replica's Pod,
        for ``_drop_lost`` once the group has been told (None: the spare is gone, or no Pod is left)."""
        if action.spare not in self._pods or self.reports is None:
            return None  # gone meanwhile: the lost replica stays failed, and the planner restarts the group
        lost_pod = self._pod_of(action.replica, action.attempt)
        # The spare first: if the API server refuses, nothing was deleted and the group restarts as before.
        self.counter.add("patch")
        patch = spares_mapping.promotion_patch(job, action.replica, action.attempt)
        self.client.patch(Pod, action.spare, patch, namespace=job.namespace, patch_type=PatchType.MERGE)
        return lost_pod

    def _drop_lost(self, job: PyTorchJob, action: RepairReplica, lost_pod: dict[str, Any]) -> None:
        """A repaired replica's lost Pod goes, its output kept."""
        uid = str(lost_pod["metadata"].get("uid", ""))[:8]  # one lost Pod of the replica among several
        self.logs.keep(job, [(action.attempt, f"{action.replica}.lost-{uid}", lost_pod)])
        if action.handover:
            return  # still training until the group re-forms without it: its eviction's grace period ends it
        # A hung Pod is still running: no grace, so that its peers, blocked in a collective with it, see it
        # fail at once (a stopped process never acts on SIGTERM anyway).
        self._delete(Pod, lost_pod["metadata"]["name"], job.namespace, grace_period=0 if action.force else 1)
        self._pods.pop(lost_pod["metadata"]["name"], None)

    def _reform(self, job: PyTorchJob, action: ReformGroup) -> None:
        """Tell the group its next membership (the operator's ``/membership`` endpoint, which its members poll)."""
        if self.reports is not None:
            self.reports.publish_membership(
                job.namespace, job.name, action.membership.to_json(), job.metadata.uid or ""
            )

    def _keep_logs(self, job: PyTorchJob, deletes: list[DeleteReplica]) -> None:
        """File the output of the Pods about to be deleted in their attempt's ConfigMap (log_archive.py)."""
        found = [(a, self._pod_of(a.replica, a.attempt)) for a in deletes]
        self.logs.keep(job, [(a.attempt, str(a.replica), pod) for a, pod in found if pod is not None])

    def _pod_of(self, replica: ReplicaId, attempt: int) -> dict[str, Any] | None:
        """The Pod that is ``replica`` of ``attempt`` (after a repair, a promoted spare of another name)."""
        mine = [p for p in self._pods.values() if observing.replica_of(p) == (replica, attempt)]
        return min(mine, key=lambda p: p["metadata"].get("deletionTimestamp") is not None, default=None)

    def _delete_replicas(self, job: PyTorchJob, actions: list[DeleteReplica]) -> None:
        calls = [call for action in actions for call in self._replica_deletes(job, action)]
        fanout.each(calls)

    def _replica_deletes(self, job: PyTorchJob, action: DeleteReplica) -> list[Callable[[], None]]:
        """The requests that delete a replica's Pod (and, when the job is over, its Service), to be made."""
        pod = self._pod_of(action.replica, action.attempt)
        if pod is None:
            return []  # already gone, or the name now belongs to another attempt
        grace = job.annotation(extensions.TERMINATION_GRACE)
        seconds = 1 if action.at_once else int(float(grace)) if grace is not None else None
        # Force (grace 0, as `kubectl delete --force`): a graceful delete waits for the kubelet to confirm the
        # stop. For a Pod lost with its node that kubelet is gone, so the Pod would stay Terminating and hold its
        # name (and the next attempt) forever; Kubernetes' own answer, the out-of-service taint, waits for a
        # person. For a survivor blocked in a dead collective the confirmation only delays the next attempt.
        calls: list[Callable[[], None]] = [
            functools.partial(self._delete, Pod, pod["metadata"]["name"], job.namespace, 0 if action.force else seconds)
        ]
        if action.final:
            # The job is over: its Services go with its Pods (under cleanPodPolicy, as Kubeflow does).
            calls.append(functools.partial(self._delete, Service, action.replica.pod_name(job.name), job.namespace))
        return calls


def _owned_by(pod: dict[str, Any], uid: str | None) -> bool:
    return any(ref.get("uid") == uid for ref in pod.get("metadata", {}).get("ownerReferences") or [])
