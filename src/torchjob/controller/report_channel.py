"""The operator's report channel: the endpoint Pods send progress to (``report_server.py``), its TLS
(``report_tls.py``), and how a report turns into a look at its job.

A standby serves too, though deploy/'s Service sends reports to the leader alone (``leader_label.py``); an
operator run without that label is reached directly. Only the leader looks at a job because of a report.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any

from lightkube import Client

from torchjob.backends.kubernetes.backend import KubernetesBackend
from torchjob.backends.kubernetes.cluster import JobKey
from torchjob.backends.kubernetes.nodes import QUIET_SECONDS
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.backends.kubernetes.token_review import ApiTokenReviewer
from torchjob.controller import report_tls
from torchjob.controller.report_server import report_server
from torchjob.controller.workqueue import WorkQueue

log = logging.getLogger("torchjob.operator")

# A job that reports is looked at again at most this often: its status shows progress without a write per report.
REPORT_PASS_SECONDS = 2.0
# A pass reads every Pod of the job, so a wide job's report passes come further apart: a pass per this many reports
# a second, a second apart (1,024 replicas beating each second: a pass every 4 s), but never rarer than the most.
# A silent replica is looked for when its deadline is due (core/policies/progress.py), not at these passes.
REPORTS_PER_PASS_SECOND = 256.0
MOST_REPORT_PASS_SECONDS = 10.0
# How often the Pods' silences are looked for (QuietReporters), and when a silent Pod is forgotten.
QUIET_SWEEP_SECONDS = 0.2
_FORGET_QUIET_SECONDS = 600.0


class ReportPacing:
    """When a job's reports call for a look at it: once per interval that grows with how often it reports."""

    def __init__(self) -> None:
        self._last: dict[JobKey, float] = {}  # when each job's last report pass was asked for (monotonic)
        self._interval: dict[JobKey, float] = {}
        self._heard: dict[JobKey, int] = {}  # reports since then

    def heard(self, key: JobKey, now: float) -> float | None:
        """A report of ``key`` came at ``now``: the delay to look at the job after, or None (one is asked for)."""
        self._heard[key] = self._heard.get(key, 0) + 1
        last = self._last.get(key)
        if last is not None and now - last < self._interval.get(key, REPORT_PASS_SECONDS):
            return None
        rate = self._heard.pop(key) / (now - last) if last is not None and now > last else 0.0
        interval = min(MOST_REPORT_PASS_SECONDS, max(REPORT_PASS_SECONDS, rate / REPORTS_PER_PASS_SECOND))
        self._last[key], self._interval[key] = now, interval
        return interval


class QuietReporters:
    """The Pods that fell quiet on the report channel, each once per silence, with its job: so that the job is looked
    at as soon as a Pod has missed a beat and a half (``nodes.QUIET_SECONDS``), the pass that probes its node
    (``nodes.py``), and not at the job's next paced pass (every 4 s at 1,024 replicas). A vanished node's replicas
    fall quiet together: their job is looked at once. O(reporting Pods) per sweep, a few times a second."""

    def __init__(self, quiet_seconds: float = QUIET_SECONDS) -> None:
        self.quiet_seconds = quiet_seconds
        self._lock = threading.Lock()
        self._heard: dict[str, tuple[JobKey, float]] = {}  # by Pod uid: its job, when it was last heard (monotonic)
        self._quiet: set[str] = set()  # those whose job was already looked at for this silence

    def heard(self, uid: str, key: JobKey, now: float) -> None:
        with self._lock:
            self._heard[uid] = (key, now)
            self._quiet.discard(uid)

    def fell_quiet(self, now: float) -> set[JobKey]:
        """The jobs of the Pods that fell quiet since the last call; a Pod silent for long is forgotten (gone)."""
        found = set()
        with self._lock:
            for uid, (key, at) in list(self._heard.items()):
                silent = now - at
                if silent >= _FORGET_QUIET_SECONDS:
                    del self._heard[uid]
                    self._quiet.discard(uid)
                elif silent >= self.quiet_seconds and uid not in self._quiet:
                    self._quiet.add(uid)
                    found.add(key)
        return found


class ReportChannel:
    """Serves the report endpoint for one operator, and queues a look at a job its reports call for."""

    def __init__(
        self,
        client: Client,
        board: ReportBoard,
        backend: KubernetesBackend,
        queue: WorkQueue[JobKey],
        leading: Callable[[], bool],
    ) -> None:
        self.client = client
        self.board = board
        self.backend = backend
        self.queue = queue
        self.leading = leading
        self.server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()
        self._pacing = ReportPacing()
        self._quiet = QuietReporters()

    def serve(
        self,
        address: tuple[str, int],
        url: str,
        secret: tuple[str, str],
        spawn: Callable[..., None],
        stopping: threading.Event,
    ) -> None:
        """Serve at ``address``, advertised to Pods as ``url``; https: with a CA kept in the Secret ``secret``
        (namespace, name), renewed. ``spawn(name, target, *args)`` starts the serving threads. Once only."""
        if self.server is not None:
            return
        self.server = report_server(self.board, ApiTokenReviewer(self.client), address, self.on_report)
        if url.startswith("https://"):
            hosts = report_tls.hosts_of(url, address)
            certificates = report_tls.ensure(self.client, secret, hosts)
            self.backend.report_ca = certificates.ca_cert
            context = report_tls.secure(self.server, certificates)
            renew: tuple[Any, ...] = (self.client, secret, hosts, certificates, context, self._new_ca, stopping)
            spawn("report-tls", report_tls.keep_renewed, *renew)
        else:
            log.warning("progress reports over plain HTTP (%s): Pods' tokens cross the network readable", url)
        spawn("reports", self.server.serve_forever)
        spawn("report-silences", self._look_at_silences, stopping)
        log.info("hearing progress reports at %s", url)

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.shutdown()

    def _new_ca(self, certificates: report_tls.Certificates) -> None:
        self.backend.report_ca = certificates.ca_cert

    def _look_at_silences(self, stopping: threading.Event) -> None:
        while not stopping.wait(QUIET_SWEEP_SECONDS):
            quiet = self._quiet.fell_quiet(time.monotonic())
            if self.leading():
                for key in quiet:
                    self.queue.add(key)

    def on_report(self, namespace: str, name: str, news: bool, pod_uid: str) -> None:
        """Look at a reporting job again soon, at most once per interval. News (an in-place member waits on a
        peer, a spare is warm) is looked at now; a Pod that falls quiet, as soon as it does (``QuietReporters``)."""
        key, now = (namespace, name), time.monotonic()
        self._quiet.heard(pod_uid, key, now)
        if not self.leading():
            return  # a standby only keeps the reports; the leader acts on them
        if news:
            self.queue.add(key)
            return
        with self._lock:
            delay = self._pacing.heard(key, now)
        if delay is not None:
            self.queue.add_after(key, delay)
