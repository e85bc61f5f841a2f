"""The torchjob operator: reconciles every PyTorchJob on a cluster with the same planner as ``torchjob run``.

This module holds the watches, the work queue's workers and one job's reconcile; ``controller/running.py``
runs it (alone, or under leader election) and ``controller/health.py`` serves its probes.

Two watches (PyTorchJobs, and Pods carrying the Kubeflow operator label) turn changes into job keys on a
work queue; worker threads take a key, read the job and its Pods fresh from the API server, plan, act and
write the status. Nothing is remembered between passes, so killing the operator at any point is safe: a new
one lists everything (a watch without a resourceVersion starts with every object) and converges. Timers
(activeDeadlineSeconds, TTL, backoff) are requeues at the time the planner asks for.

Jobs whose ``spec.runPolicy.managedBy`` names another controller (MultiKueue, say) are left alone. With
leader election (``--leader-elect``) several replicas can run; only the one holding the Lease acts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from lightkube import ALL_NS, ApiError, Client
from lightkube.resources.core_v1 import Pod

from torchjob.api import extensions
from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.loading import job_from_mapping
from torchjob.api.types import ConditionType, JobStatus
from torchjob.backends.kubernetes.backend import KubernetesBackend
from torchjob.backends.kubernetes.cluster import PyTorchJobResource, as_dict
from torchjob.backends.kubernetes.report_board import ApiTokenReviewer, ReportBoard
from torchjob.backends.kubernetes.requests import RequestCounter
from torchjob.controller import leader_label, report_tls
from torchjob.controller.clock import Clock, SystemClock
from torchjob.controller.health import health_server
from torchjob.controller.leader import ElectionSettings
from torchjob.controller.loop import reconcile_once
from torchjob.controller.metrics import OperatorMetrics
from torchjob.controller.report_server import report_server
from torchjob.controller.watching import JobKey, job_key, one_line, pod_owner_key
from torchjob.controller.workqueue import WorkQueue
from torchjob.core import conditions, replicas
from torchjob.core.actions import Event
from torchjob.core.times import timestamp

log = logging.getLogger("torchjob.operator")


# managedBy values this operator answers to: unset, Kubeflow's own (torchjob stands in for it), and ours.
DEFAULT_MANAGED_BY = (extensions.KUBEFLOW_MANAGERS[0], extensions.TORCHJOB_MANAGER)
_RETRY_SECONDS = 2.0
_REPORT_PASS_SECONDS = 2.0
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
        self.stopping = threading.Event()
        self.health = _Health()
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None
        self._report_server: ThreadingHTTPServer | None = None
        self._report_lock = threading.Lock()
        self._report_passes: dict[JobKey, float] = {}
        # False while a replica waits for the leader election lease; it then watches and acts on nothing.
        self.leading = False

    # -- lifecycle ------------------------------------------------------------------------------------

    def serve_health(self) -> None:
        """Serve /healthz, /readyz and /metrics, and the report endpoint (once), before or without leading."""
        if self.settings.health_port is not None and self._server is None:
            self._server = health_server(self, self.settings.health_port)
            self._spawn("health", self._server.serve_forever)
        self._serve_reports()

    def start(self) -> None:
        self.leading = True
        self.serve_health()
        leader_label.claim(self.client, leader_label.own_pod())  # the report Service now points here
        if self.reports is not None:
            self.reports.listening_since = self.clock.now()
        self._spawn("watch-jobs", self._watch, PyTorchJobResource, None, job_key)
        labels: dict[str, Any] = {replicas.LABEL_OPERATOR: replicas.OPERATOR_NAME}
        self._spawn("watch-pods", self._watch, Pod, labels, pod_owner_key)
        self._spawn("resync", self._resync)
        for i in range(self.settings.workers):
            self._spawn(f"worker-{i}", self._work)
        where = self.settings.namespace or "all namespaces"
        log.info("torchjob operator started: watching PyTorchJobs in %s with %d workers", where, self.settings.workers)

    def stop(self) -> None:
        self.stopping.set()
        if self.leading:
            leader_label.release(self.client, leader_label.own_pod())
        self.queue.close()
        for server in (self._server, self._report_server):
            if server is not None:
                server.shutdown()
        for thread in self._threads:
            if thread.name.startswith("worker"):
                thread.join(timeout=30)

    def _serve_reports(self) -> None:
        """Hear Pods' progress reports: a standby serves too, though deploy/'s Service sends them to the
        leader alone (leader_label.py); an operator run without that label is reached directly."""
        if self.reports is None or self.settings.report_address is None or self._report_server is not None:
            return
        reviewer = ApiTokenReviewer(self.client)
        address, url = self.settings.report_address, self.settings.advertised_report_url or ""
        self._report_server = report_server(self.reports, reviewer, address, self._on_report)
        if url.startswith("https://"):
            hosts, secret = report_tls.hosts_of(url, address), self.settings.report_secret
            certificates = report_tls.ensure(self.client, secret, hosts)
            self.backend.report_ca = certificates.ca_cert
            context = report_tls.secure(self._report_server, certificates)
            renew = (self.client, secret, hosts, certificates, context, self._new_report_ca, self.stopping)
            self._spawn("report-tls", report_tls.keep_renewed, *renew)
        else:
            log.warning("progress reports over plain HTTP (%s): Pods' tokens cross the network readable", url)
        self._spawn("reports", self._report_server.serve_forever)
        log.info("hearing progress reports at %s", url)

    def _new_report_ca(self, certificates: report_tls.Certificates) -> None:
        self.backend.report_ca = certificates.ca_cert

    def _on_report(self, namespace: str, name: str, news: bool) -> None:
        """Look at a reporting job again soon, at most once per interval: its status shows progress without a
        status write per report. News (an in-place member waits on a peer, a spare is warm) is looked at now."""
        if not self.leading:
            return  # a standby only keeps the reports; the leader acts on them
        key, now = (namespace, name), time.monotonic()
        if news:
            self.queue.add(key)
            return
        with self._report_lock:
            if now - self._report_passes.get(key, -_REPORT_PASS_SECONDS) < _REPORT_PASS_SECONDS:
                return
            self._report_passes[key] = now
        self.queue.add_after(key, _REPORT_PASS_SECONDS)

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
        self, resource: Any, labels: dict[str, Any] | None, key_of: Callable[[dict[str, Any]], JobKey | None]
    ) -> None:
        name = threading.current_thread().name  # watch-jobs | watch-pods, what readiness tracks
        while not self.stopping.is_set():
            try:
                self.counter.add("watch")
                # No resourceVersion: the server first replays every object as ADDED, so a (re)started watch
                # sees everything; lightkube restarts from scratch by itself on 410 Gone.
                stream: Iterable[tuple[str, Any]] = self.client.watch(
                    resource, namespace=self.settings.namespace or ALL_NS, labels=labels, server_timeout=_WATCH_SECONDS
                )
                self.health.synced.add(name)
                for _, obj in stream:
                    key = key_of(as_dict(obj))
                    if key is not None:
                        self.queue.add(key)
                    if self.stopping.is_set():
                        return
            except Exception as err:  # noqa: BLE001 - any failure of a watch (API server restart...) is retried
                self.health.synced.discard(name)
                log.warning("%s: %s; watching again in %.0fs", name, one_line(err), _RETRY_SECONDS)
                self.stopping.wait(_RETRY_SECONDS)

    def _resync(self) -> None:
        while not self.stopping.wait(self.settings.resync_seconds):
            try:
                self.counter.add("list")
                for job in self.client.list(PyTorchJobResource, namespace=self.settings.namespace or ALL_NS):
                    key = job_key(as_dict(job))
                    if key is not None:
                        self.queue.add(key)
            except Exception as err:  # noqa: BLE001 - the next resync tries again
                log.warning("resync: %s", one_line(err))

    # -- reconciling ----------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                self.reconcile(key)
            except Exception as err:  # noqa: BLE001 - one job's trouble must not stop the others
                self.prometheus.failed_pass(err)
                log.warning("%s/%s: %s; retrying in %.0fs", *key, one_line(err), _RETRY_SECONDS)
                self.queue.add_after(key, _RETRY_SECONDS)
            finally:
                self.queue.done(key)

    def reconcile(self, key: JobKey) -> None:
        namespace, name = key
        self.counter.add("get")
        try:
            wire = as_dict(self.client.get(PyTorchJobResource, name, namespace=namespace))
        except ApiError as err:
            if err.status.code == 404:
                self.prometheus.forget(key)
                return  # deleted: its Pods and Services go with it (ownerReferences)
            raise
        if (wire.get("metadata") or {}).get("deletionTimestamp"):
            self.prometheus.forget(key)
            return  # being deleted: the garbage collector removes its Pods and Services; creating more would fight it
        managed_by = ((wire.get("spec") or {}).get("runPolicy") or {}).get("managedBy")
        if managed_by and managed_by not in self.settings.managed_by:
            self.prometheus.forget(key)
            return
        try:
            job = job_from_mapping(wire, source=f"PyTorchJob {namespace}/{name}")
        except (ValidationError, JobFileError) as err:
            self._reject(wire, str(err))
            return
        before = conditions.state(job.status)
        started = time.monotonic()
        result = reconcile_once(job, self.backend, self.clock)
        self.health.passes += 1
        after = conditions.state(result.job.status)
        self.prometheus.passed(key, after, result.events, self.clock.now(), time.monotonic() - started)
        if after != before:
            log.info("%s/%s: %s → %s (attempt %d)", namespace, name, before, after, result.job.status.attempt + 1)
        for event in (e for e in result.events if e.type == "Warning"):  # a repair, a hang, a lost node: worth a line
            log.info("%s/%s: %s (%s)", namespace, name, event.message, event.reason)
        if result.requeue_at is not None:
            self.queue.add_after(key, (result.requeue_at - self.clock.now()).total_seconds())

    def _reject(self, wire: dict[str, Any], problem: str) -> None:
        """An invalid job (one the CRD's schema let through) gets a Failed condition saying what is wrong."""
        status = JobStatus.model_validate(wire.get("status") or {})
        if conditions.is_true(status, ConditionType.FAILED):
            return
        metadata = wire["metadata"]
        cause = f"its spec is invalid: {problem}"
        now = self.clock.now()
        message = conditions.fail_job(status, metadata["namespace"], metadata["name"], cause, now)
        status.last_reconcile_time = timestamp(now)
        wire_status = status.model_dump(by_alias=True, exclude_none=True, mode="json")
        self.backend.patch_status(metadata["namespace"], metadata["name"], wire_status)
        self.backend.emit(
            metadata["namespace"], metadata["name"], metadata.get("uid"), Event("Warning", "InvalidSpec", message)
        )
