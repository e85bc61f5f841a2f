"""Warm restarts in Pods: the operator's half of a Pod's launcher (``torchjob.launch``, pod.py).

A job asks for them with ``torchjob.io/warm-start: "true"`` (on Kubernetes they are off by default: the launcher
is torchjob's, so the image must have torchjob installed). The trainer container of such a job, when it runs a
Python script (``python [-u] SCRIPT|-m MODULE ...``, ``launch/entry.py``), runs it through the launcher:
``python -s -m torchjob.launch -- <its command>``. Its Pod then says how its trainer is (report_board.py), and a
group restart gives it an order (``RestartWarm``) instead of deleting it: the Pod is relabelled into the next
attempt and its launcher forks the script again, torch already imported, within a poll of the order.

Static groups only: an elastic group's agents restart their own workers, and an in-place group is repaired
around its running members. A command of any other form starts cold, as before, and so does every replica
whose Pod cannot restart warm (its container ended, its node is lost): the planner deletes and recreates those.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torchjob import worker_files
from torchjob.api import extensions
from torchjob.api.types import DEFAULT_CONTAINER_NAME, PyTorchJob
from torchjob.backends.kubernetes import observing
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.core import envs, replicas
from torchjob.core.envs import Addressing, replica_env
from torchjob.core.observed import Phase, ReplicaObservation
from torchjob.core.replicas import ReplicaId
from torchjob.launch.entry import WarmEntry, python_entry

LAUNCHER = ["-s", "-m", "torchjob.launch", "--"]
POD_GRACE_SECONDS = 30.0  # a Pod's terminationGracePeriodSeconds when it sets none
_PYTHON = re.compile(r"python(3(\.\d+)?)?")


def applies(job: PyTorchJob) -> bool:
    return (
        job.annotation(extensions.WARM_START) == "true" and job.spec.elastic_policy is None and not envs.in_place(job)
    )


def with_launcher(spec: dict[str, Any], job: PyTorchJob) -> dict[str, Any]:
    """A Pod spec whose trainer container starts its script through the launcher, where the job asks for it and
    the command is a Python script; else ``spec`` as it is."""
    if not applies(job):
        return spec
    for container in spec.get("containers") or []:
        command = container.get("command") or []
        if container.get("name") != replicas.container_name(job) or not command:
            continue
        if not _PYTHON.fullmatch(os.path.basename(command[0])):
            continue
        if not isinstance(python_entry([*command[1:], *(container.get("args") or [])]), WarmEntry):
            continue
        container["command"] = [command[0], *LAUNCHER, *command]
        preload = job.annotation(extensions.WARM_PRELOAD)
        if preload:
            container.setdefault("env", []).append({"name": worker_files.ENV_WARM_PRELOAD, "value": preload})
    return spec


def restart_order(
    job: PyTorchJob, replica: ReplicaId, attempt: int, addressing: Addressing, at_once: bool
) -> worker_files.RestartOrder:
    """The order that starts ``attempt`` of ``replica`` in its Pod: the attempt's contract variables (those the
    container does not set itself, as in its Pod's manifest), and how long the old trainer may take to stop."""
    template = job.spec.pytorch_replica_specs[replica.replica_type].template
    spec = template.get("spec") or {}
    trainer = [c for c in spec.get("containers") or [] if c.get("name") == DEFAULT_CONTAINER_NAME]
    own = {e.get("name") for c in trainer for e in c.get("env") or []}
    env = {k: v for k, v in replica_env(job, replica, attempt, addressing) if k not in own}
    # As a Pod's deletion would give it: the job's grace, else the Pod's own, else Kubernetes' default.
    grace = job.annotation(extensions.TERMINATION_GRACE) or spec.get("terminationGracePeriodSeconds")
    seconds = 0.0 if at_once else float(grace) if grace is not None else POD_GRACE_SECONDS
    return worker_files.RestartOrder(attempt=attempt, env=env, grace=seconds)


def with_trainer(
    board: ReportBoard | None, seen: ReplicaObservation | None, pod: dict[str, Any]
) -> ReplicaObservation | None:
    """A running replica with what its launcher said: it can restart warm, and its trainer's end is the
    replica's failure (the Pod runs on, waiting for the order). Untouched where no launcher spoke."""
    state = board.trainer(pod["metadata"].get("uid")) if board is not None else None
    if seen is None or state is None or seen.phase is not Phase.RUNNING:
        return seen
    if seen.stopping or seen.silent_node is not None:
        return seen  # going, or perhaps lost with its node: it starts no attempt again
    if state.attempt > seen.attempt:
        return seen  # cannot be: a launcher starts a later attempt only once its Pod was relabelled
    if state.attempt == seen.attempt and state.exit_code not in (None, 0):
        ended = replace(seen, phase=Phase.FAILED, exit_code=state.exit_code, finished_at=state.ended_at)
        return replace(ended, progress=None, message=None, restarts_warm=True)
    return replace(seen, restarts_warm=True)


def give_lost_orders(
    board: ReportBoard, job: PyTorchJob, pods: list[dict[str, Any]], addressing: Callable[[int], Addressing]
) -> None:
    """Order again the restart of each Pod relabelled into a later attempt whose launcher still runs an earlier
    one with no order waiting: the order was given by an operator that has since lost the lead (orders live in
    the leader's memory). ``addressing``: where attempt N meets (mapping.addressing)."""
    for pod in pods:
        uid = pod["metadata"].get("uid")
        state, identity = board.trainer(uid), observing.replica_of(pod)
        if state is None or identity is None or pod["metadata"].get("deletionTimestamp") or board.has_order(uid):
            continue
        replica, attempt = identity
        if state.attempt < attempt:
            board.order_restart(uid, restart_order(job, replica, attempt, addressing(attempt), at_once=True))
