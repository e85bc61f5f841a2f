"""The torchjob operator: reconciles every PyTorchJob on a cluster with the same planner as ``torchjob run``.

This module holds the watches and the work queue's workers; ``controller/operator_main.py``
runs it (alone, or under leader election), ``controller/health.py`` serves its probes and
``controller/report_channel.py`` its report endpoint; one PyTorchJob's pass is ``controller/pytorchjobs.py``.

Two watches (PyTorchJobs, and Pods carrying the Kubeflow operator label) turn changes into job keys on a
work queue; worker threads take a key, read the job fresh from the API server and its Pods (listed again only
when the Pod watch or the operator's own acts say they may have changed: ``backends/kubernetes/pod_listings.py``),
plan, act and write the status. No decision is remembered between passes, so killing the operator at any point
is safe: a new one lists everything (a watch without a resourceVersion starts with every object) and converges. Timers
(activeDeadlineSeconds, TTL, backoff) are requeues at the time the planner asks for.

Jobs whose ``spec.runPolicy.managedBy`` names another controller (MultiKueue, say) are left alone. With
leader election (``--leader-elect``) several replicas can run; only the one holding the Lease acts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from lightkube import ALL_NS, Client, operators
from lightkube.resources.core_v1 import Pod

from torchjob.api import extensions
from torchjob.backends.kubernetes.backend import KubernetesBackend
from torchjob.backends.kubernetes.cluster import JobKey, PyTorchJobResource, as_dict
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.backends.kubernetes.requests import RequestCounter
from torchjob.controller import leader_label, report_tls
from torchjob.controller.clock import Clock, SystemClock
from torchjob.controller.elasticjobs import ElasticJobs
from torchjob.controller.health import health_server
from torchjob.controller.leader import ElectionSettings
from torchjob.controller.metrics import OperatorMetrics
from torchjob.controller.owned_runs import OwnedRuns
from torchjob.controller.pytorchjobs import PassDeps, PyTorchJobs
from torchjob.controller.report_channel import ReportChannel
from torchjob.controller.trainjobs import TrainJobs
from torchjob.controller.watching import job_key, namespace_terminating, one_line, pod_owner_key
from torchjob.controller.workqueue import WorkQueue
from torchjob.core import replicas

log = logging.getLogger("torchjob.operator")


# managedBy values this operator answers to: unset, Kubeflow's own (torchjob stands in for it), and ours.
DEFAULT_MANAGED_BY = (extensions.KUBEFLOW_MANAGERS[0], extensions.TORCHJOB_MANAGER)
_RETRY_SECONDS = 2.0
_OWNED_CRD_SECONDS = 5.0
_WATCH_SECONDS = 300  # the server ends each watch after this long; lightkube resumes it where it was


@dataclass
class OperatorSettings:
    namespace: str | None = None  # None: every namespace
    workers: int = 4
    managed_by: tuple[str, ...] = DEFAULT_MANAGED_BY
    health_port: int | None = None
    # Every job is looked at this often even without events (an informer's resync): a watch that went
    # quiet without an error (seen right after a CRD is created) cannot leave a job unattended.
    resync_seconds: float = 30.0
    # Leader election: None runs as the only operator; otherwise stand by until this replica holds the Lease.
    election: ElectionSettings | None = None
    identity: str | None = None
    # Where to serve torchjob.train's progress reports from Pods (host, port), and the URL Pods reach it by
    # (default https://host:port). None: no reports, so no hang detection and no trainerStatus on a cluster.
    report_address: tuple[str, int] | None = None
    report_url: str | None = None
    # The Secret (namespace, name) that keeps the report endpoint's CA and serving certificate (https URLs).
    report_secret: tuple[str, str] = report_tls.DEFAULT_SECRET

    @property
    def advertised_report_url(self) -> str | None:
        if self.report_address is None:
            return None
        return self.report_url or f"https://{self.report_address[0]}:{self.report_address[1]}"


@dataclass
class _Health:
    synced: set[str] = field(default_factory=set)
    passes: int = 0


class Operator:
    def __init__(self, client: Client, settings: OperatorSettings | None = None, clock: Clock | None = None) -> None:
        self.client = client
        self.settings = settings or OperatorSettings()
        self.clock = clock or SystemClock()
        self.counter = RequestCounter()
        self.prometheus = OperatorMetrics(lambda: dict(self.counter.by_verb))
        self.reports = ReportBoard() if self.settings.report_address else None
        self.backend = KubernetesBackend(client, self.counter, self.reports, self.settings.advertised_report_url)
        self.queue: WorkQueue[JobKey] = WorkQueue()
        self.reports_channel = (
            ReportChannel(client, self.reports, self.backend, self.queue, lambda: self.leading)
            if self.reports is not None
            else None
        )
        self.pytorchjobs = PyTorchJobs(
            PassDeps(
                client,
                self.backend,
                self.clock,
                self.counter,
                self.prometheus,
                self.reports,
                self.settings.managed_by,
                self.queue.add_after,
                self._count_pass,
            )
        )
        # Jobs of other kinds, each run as a PyTorchJob it owns, each kind with its own work queue.
        self.owned: dict[str, tuple[OwnedRuns, WorkQueue[JobKey]]] = {
            kind.kind: (kind, WorkQueue())
            for kind in (TrainJobs(client, self.counter), ElasticJobs(client, self.counter))
        }
        self.stopping = threading.Event()
        self._going_with_namespace: set[JobKey] = set()  # jobs told once that their namespace is being deleted
        self.health = _Health()
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None
        # False while a replica waits for the leader election lease; it then watches and acts on nothing.
        self.leading = False

    def _count_pass(self) -> None:
        self.health.passes += 1

    # -- lifecycle ------------------------------------------------------------------------------------

    def serve_health(self) -> None:
        """Serve /healthz, /readyz and /metrics, and the report endpoint (once), before or without leading."""
        if self.settings.health_port is not None and self._server is None:
            self._server = health_server(self, self.settings.health_port)
            self._spawn("health", self._server.serve_forever)
        address, url = self.settings.report_address, self.settings.advertised_report_url
        if self.reports_channel is not None and address is not None and url is not None:
            self.reports_channel.serve(address, url, self.settings.report_secret, self._spawn, self.stopping)

    def start(self) -> None:
        self.leading = True
        self.serve_health()
        leader_label.claim(self.client, leader_label.own_pod())  # the report Service now points here
        if self.reports is not None:
            self.reports.listening_since = self.clock.now()
        self._spawn("watch-jobs", self._watch, PyTorchJobResource, None, job_key)
        labels: dict[str, Any] = {replicas.LABEL_OPERATOR: replicas.OPERATOR_NAME}
        self._spawn("watch-pods", self._watch, Pod, labels, self._pod_event, None, self.backend.listings.unwatched)
        self._spawn("resync", self._resync)
        for i in range(self.settings.workers):
            self._spawn(f"worker-{i}", self._work, self.queue, self.pytorchjobs.reconcile)
        where = self.settings.namespace or "all namespaces"
        log.info("torchjob operator started: watching PyTorchJobs in %s with %d workers", where, self.settings.workers)
        for name in self.owned:
            self._spawn(f"{name.lower()}-serving", self._serve_owned, name)

    def _serve_owned(self, name: str) -> None:
        """Serve a kind run as owned PyTorchJobs (TrainJobs, ElasticJobs) once the API server does: its CRD may be
        applied with the operator, or later."""
        kind, queue = self.owned[name]
        said = False
        while not self.stopping.is_set():
            try:
                if kind.installed():
                    break
            except Exception as err:  # noqa: BLE001 - asked again below
                log.warning("looking for the %s CRD: %s", name, one_line(err))
            if not said:
                log.info("no %s CRD (%s) yet: %ss are served once there is one", name, kind.group, name)
                said = True
            self.stopping.wait(_OWNED_CRD_SECONDS)
        else:
            return
        self._spawn(f"watch-{name.lower()}s", self._watch, kind.resource, None, job_key, queue)
        runs: dict[str, Any] = {kind.label: operators.exists()}
        self._spawn(f"watch-{name.lower()}-runs", self._watch, PyTorchJobResource, runs, kind.child_key, queue)
        self._spawn(f"{name.lower()}-worker", self._work, queue, kind.reconcile)
        log.info("serving %ss (%s): each runs as a PyTorchJob it owns", name, kind.group)

    def stop(self) -> None:
        self.stopping.set()
        if self.leading:
            leader_label.release(self.client, leader_label.own_pod())
        self.queue.close()
        for _, queue in self.owned.values():
            queue.close()
        if self._server is not None:
            self._server.shutdown()
        if self.reports_channel is not None:
            self.reports_channel.shutdown()
        for thread in self._threads:
            if thread.name.startswith("worker"):
                thread.join(timeout=30)

    @property
    def alive(self) -> bool:
        return not self.stopping.is_set()

    def counters(self) -> dict[str, object]:
        """What bench/ reads: API requests by verb, reconcile passes, whether this replica leads."""
        return {"requests": dict(self.counter.by_verb), "passes": self.health.passes, "leader": self.leading}

    def exposition(self) -> bytes:
        return self.prometheus.exposition()

    @property
    def ready(self) -> bool:
        # A standby (waiting for the lease) is ready to take over; a leader once its watches have synced.
        return not self.leading or {"watch-jobs", "watch-pods"} <= self.health.synced

    def _spawn(self, name: str, target: Callable[..., Any], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- watches --------------------------------------------------------------------------------------

    def _watch(
        self,
        resource: Any,
        labels: dict[str, Any] | None,
        key_of: Callable[[dict[str, Any]], JobKey | None],
        queue: WorkQueue[JobKey] | None = None,
        on_break: Callable[[], None] = lambda: None,
    ) -> None:
        """Queue the job ``key_of`` names for each event of ``resource``. ``on_break`` wherever events may go
        unseen: before each stream begins, and when one fails."""
        name = threading.current_thread().name  # watch-jobs | watch-pods, what readiness tracks
        queue = self.queue if queue is None else queue  # not `or`: an empty WorkQueue is falsy (it has __len__)
        while not self.stopping.is_set():
            try:
                self.counter.add("watch")
                on_break()  # events between the last stream's end and this one's start are not seen
                # No resourceVersion: the server first replays every object as ADDED, so a (re)started watch
                # sees everything; lightkube restarts from scratch by itself on 410 Gone.
                stream: Iterable[tuple[str, Any]] = self.client.watch(
                    resource, namespace=self.settings.namespace or ALL_NS, labels=labels, server_timeout=_WATCH_SECONDS
                )
                self.health.synced.add(name)
                for _, obj in stream:
                    key = key_of(as_dict(obj))
                    if key is not None:
                        queue.add(key)
                    if self.stopping.is_set():
                        return
            except Exception as err:  # noqa: BLE001 - any failure of a watch (API server restart...) is retried
                on_break()
                self.health.synced.discard(name)
                log.warning("%s: %s; watching again in %.0fs", name, one_line(err), _RETRY_SECONDS)
                self.stopping.wait(_RETRY_SECONDS)

    def _pod_event(self, pod: dict[str, Any]) -> JobKey | None:
        """The job a Pod event is for, whose Pods are then listed again at its next pass."""
        key = pod_owner_key(pod)
        self.backend.listings.watching()
        if key is not None:
            self.backend.listings.changed(key)
        return key

    def _resync(self) -> None:
        while not self.stopping.wait(self.settings.resync_seconds):
            try:
                self.counter.add("list")
                for job in self.client.list(PyTorchJobResource, namespace=self.settings.namespace or ALL_NS):
                    key = job_key(as_dict(job))
                    if key is not None:
                        self.queue.add(key)
                served = {t.name for t in self._threads}
                for name, (kind, queue) in self.owned.items():
                    if f"{name.lower()}-worker" not in served:
                        continue
                    self.counter.add("list")
                    for owner in self.client.list(kind.resource, namespace=self.settings.namespace or ALL_NS):
                        key = job_key(as_dict(owner))
                        if key is not None:
                            queue.add(key)
            except Exception as err:  # noqa: BLE001 - the next resync tries again
                log.warning("resync: %s", one_line(err))

    # -- reconciling ----------------------------------------------------------------------------------

    def _work(self, queue: WorkQueue[JobKey], reconcile: Callable[[JobKey], None]) -> None:
        while True:
            key = queue.get()
            if key is None:
                return
            try:
                reconcile(key)
                self._going_with_namespace.discard(key)
            except Exception as err:  # noqa: BLE001 - one job's trouble must not stop the others
                self.prometheus.failed_pass(err)
                if not namespace_terminating(err):
                    log.warning("%s/%s: %s; retrying in %.0fs", *key, one_line(err), _RETRY_SECONDS)
                elif key not in self._going_with_namespace:  # it goes with its namespace: said once, not each pass
                    self._going_with_namespace.add(key)
                    log.info("%s/%s: its namespace is being deleted; the job goes with it", *key)
                queue.add_after(key, _RETRY_SECONDS)
            finally:
                queue.done(key)
