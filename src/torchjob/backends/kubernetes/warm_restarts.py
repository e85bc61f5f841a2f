"""Warm restarts in Pods, the operator's I/O: relabel a Pod into the next attempt and order its launcher to stop
its trainer, order the start once it has stopped, and read what a trainer printed before it failed.

The decisions are warm_pods.py's (which Pods, which order, how a Pod is observed); this module carries them out
against the API server and the report board. A warm Pod's container never terminates, so the kubelet's
termination message (the cold path's "last lines") never comes: the trainer's last lines are read from the
Pod's log instead, once per failure. And the Pod's output up to the end of an attempt is filed in that attempt's
log archive when the next one starts in it, as a deleted Pod's is before it goes (log_keeper.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from torchjob.api.types import PyTorchJob
from torchjob.backends.kubernetes import mapping, observing, warm_pods
from torchjob.backends.kubernetes.log_keeper import LogKeeper
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.core import replicas
from torchjob.core.observed import Phase, ReplicaObservation
from torchjob.core.replicas import ReplicaId

# As much of the log as the kubelet's FallbackToLogsOnError keeps for a cold container's termination message.
FAILURE_TAIL_LINES = 80
# Trainers' last lines remembered (by Pod uid); a Pod long gone is forgotten first.
REMEMBERED = 256


class WarmRestarts:
    def __init__(self, client: Client, reports: ReportBoard, count: Callable[[str], None], logs: LogKeeper) -> None:
        """``count(verb)`` is told of every API request (the operator's request counter)."""
        self.client, self.reports, self.count, self.logs = client, reports, count, logs
        # Pod uid → (when its trainer ended, its last lines): read once per end.
        self._failures: dict[str, tuple[datetime | None, str | None]] = {}

    def restart(self, job: PyTorchJob, pod: dict[str, Any], replica: ReplicaId, after: int, at_once: bool) -> None:
        """``pod`` moves into attempt ``after`` (its label) and its launcher is told to stop its trainer."""
        self.count("patch")
        relabel = {"metadata": {"labels": {replicas.LABEL_ATTEMPT: str(after)}}}
        name = pod["metadata"]["name"]
        try:
            self.client.patch(Pod, name, relabel, namespace=job.namespace, patch_type=PatchType.MERGE)
        except ApiError:
            return  # gone meanwhile: the next pass finds the replica missing and creates it
        where = mapping.addressing(job, after, at_store=False)
        order = warm_pods.restart_order(job, replica, after, where, at_once, start=False)
        self.reports.order_restart(pod["metadata"]["uid"], order)

    def start(self, job: PyTorchJob, pod: dict[str, Any] | None, replica: ReplicaId, attempt: int) -> bool:
        """Start ``attempt`` in ``pod`` if its launcher waits for it there; the output of the attempt that ended in
        it is filed first (while its launcher waits, nothing is added to it)."""
        if pod is None or not warm_pods.waits_to_start(self.reports, pod, attempt):
            return False
        ended = self.reports.trainer(pod["metadata"]["uid"])
        if ended is not None:
            self.logs.keep(job, [(ended.attempt, str(replica), pod)])
        where = mapping.addressing(job, attempt, at_store=False)
        order = warm_pods.restart_order(job, replica, attempt, where, at_once=True, start=True)
        self.reports.order_restart(pod["metadata"]["uid"], order)
        return True

    def with_last_lines(
        self, job: PyTorchJob, seen: ReplicaObservation | None, pod: dict[str, Any]
    ) -> ReplicaObservation | None:
        """A replica whose trainer failed in a warm Pod, with the trainer's last lines for the job's conditions
        (the cold path has them from the container's termination message)."""
        if seen is None or seen.phase is not Phase.FAILED or not seen.restarts_warm or seen.message is not None:
            return seen
        uid = str(pod["metadata"].get("uid", ""))
        known = self._failures.get(uid)
        if known is None or known[0] != seen.finished_at:
            text = self.logs.read(job, pod, FAILURE_TAIL_LINES)
            known = (seen.finished_at, observing.last_lines(text or "") or None)
            self._failures.pop(uid, None)
            self._failures[uid] = known
            while len(self._failures) > REMEMBERED:  # the oldest first; another worker may be dropping it too
                self._failures.pop(next(iter(self._failures)), None)
        return replace(seen, message=known[1])
