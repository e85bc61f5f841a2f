"""The operator's Prometheus metrics, served at ``/metrics`` in the standard text format.

Everything is derived from what the operator already does: each reconcile pass (its duration, the job's
state after it) and the planner's events, which carry their cause (``core.actions.Cause``). So the numbers
count the planner's decisions, not a second opinion of them. Names follow Prometheus conventions
(``_total`` counters, ``_seconds`` histograms, base units):

- ``torchjob_jobs{state}``: PyTorchJobs this operator reconciled, by their state now (gauge).
- ``torchjob_job_restarts_total{cause}``, ``torchjob_job_repairs_total{cause}``: group restarts and in-place
  repairs, by the kind of their root cause (``ExitCode``, ``Signal``, ``OOMKilled``, ``Evicted``, ``Hung``...).
- ``torchjob_job_failures_total{cause}``: jobs that ended Failed.
- ``torchjob_failure_detection_seconds``: from a failure's onset (a replica's exit, a hung group's last
  progress) to the planner's decision about it.
- ``torchjob_recovery_seconds``: from a failure's onset to the restarted group running again.
- ``torchjob_reconcile_duration_seconds``, ``torchjob_reconcile_errors_total{error}``, and
  ``torchjob_api_requests_total{verb}`` (every request the operator made to the API server).
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from torchjob.backends.kubernetes.cluster import JobKey
from torchjob.core.actions import Event

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A failure is seen within ~1 s (a watch event), a hang within its deadline; a recovery takes a cold start.
_DETECTION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
_RECOVERY_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
_RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class OperatorMetrics:
    """One per operator process. Thread-safe: reconcile workers report passes concurrently."""

    def __init__(self, requests_by_verb: Callable[[], dict[str, int]]) -> None:
        self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._states: dict[JobKey, str] = {}
        self._failed_at: dict[JobKey, datetime] = {}  # onsets of restarts whose group is not running yet
        self.restarts = self._by_cause("torchjob_job_restarts", "Group restarts")
        self.repairs = self._by_cause("torchjob_job_repairs", "In-place repairs")
        self.failures = self._by_cause("torchjob_job_failures", "Jobs that ended Failed")
        self.detection = self._seconds(
            "torchjob_failure_detection_seconds",
            "From a failure's onset to the planner's decision about it",
            _DETECTION_BUCKETS,
        )
        self.recovery = self._seconds(
            "torchjob_recovery_seconds",
            "From a failure's onset to the restarted group running again",
            _RECOVERY_BUCKETS,
        )
        self.reconcile_duration = self._seconds(
            "torchjob_reconcile_duration_seconds", "One reconcile pass of one job", _RECONCILE_BUCKETS
        )
        self.reconcile_errors = Counter(
            "torchjob_reconcile_errors", "Reconcile passes that failed, by error", ["error"], registry=self.registry
        )
        self.registry.register(_Snapshot(self._job_states, requests_by_verb))

    def _by_cause(self, name: str, what: str) -> Counter:
        return Counter(name, f"{what}, by their root cause", ["cause"], registry=self.registry)

    def _seconds(self, name: str, what: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, what, buckets=buckets, registry=self.registry)

    def passed(self, key: JobKey, state: str, events: list[Event], now: datetime, seconds: float) -> None:
        """Record one reconcile pass: its duration, the job's state after it, and its events."""
        self.reconcile_duration.observe(seconds)
        for event in events:
            cause = event.cause
            if cause is None:
                continue
            counter = {"Restarting": self.restarts, "Repaired": self.repairs}.get(event.reason, self.failures)
            counter.labels(cause=cause.kind or "Unknown").inc()
            if cause.began_at is not None:
                self.detection.observe(max(0.0, (now - cause.began_at).total_seconds()))
                if event.reason == "Restarting":
                    with self._lock:
                        self._failed_at.setdefault(key, cause.began_at)
        with self._lock:
            self._states[key] = state
            began = self._failed_at.pop(key, None) if state == "Running" else None
        if began is not None:
            self.recovery.observe(max(0.0, (now - began).total_seconds()))

    def forget(self, key: JobKey) -> None:
        """The job is gone (deleted, or no longer ours)."""
        with self._lock:
            self._states.pop(key, None)
            self._failed_at.pop(key, None)

    def failed_pass(self, error: BaseException) -> None:
        self.reconcile_errors.labels(error=_error_name(error)).inc()

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))

    def _job_states(self) -> dict[str, int]:
        with self._lock:
            return dict(Tally(self._states.values()))


class _Snapshot(Collector):
    """Values read when scraped: jobs by state, and the API requests the operator has made."""

    def __init__(self, states: Callable[[], dict[str, int]], requests: Callable[[], dict[str, int]]) -> None:
        self._states = states
        self._requests = requests

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("torchjob_jobs", "PyTorchJobs reconciled by this operator, by state", labels=["state"])
        for state, count in sorted(self._states().items()):
            jobs.add_metric([state or "Pending"], count)
        yield jobs
        requests = CounterMetricFamily(
            "torchjob_api_requests", "Requests made to the Kubernetes API server, by verb", labels=["verb"]
        )
        for verb, count in sorted(self._requests().items()):
            requests.add_metric([verb], count)
        yield requests


def _error_name(error: BaseException) -> str:
    status = getattr(error, "status", None)
    code = getattr(status, "code", None)
    return f"ApiError{code}" if code is not None else type(error).__name__
