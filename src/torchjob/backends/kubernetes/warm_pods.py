"""Warm restarts in Pods: the operator's half of a Pod's launcher (``torchjob.launch``, pod.py).

A job asks for them with ``torchjob.io/warm-start: "true"`` (on Kubernetes they are off by default: the launcher is
torchjob's, so only an image with torchjob installed restarts warm). The trainer container of such a job, when it
runs a Python script (``python [-u] SCRIPT|-m MODULE ...``, ``launch/entry.py``), runs it through the launcher:
``python -s -c BOOT -- <its command>``, where BOOT runs ``torchjob.launch``, or the command itself, cold, in an
image without torchjob (the operator then never hears a launcher: the Pod is a cold one). Its Pod then says how its
trainer is (report_board.py), and a group restart does not delete it (``RestartWarm``): the Pod is relabelled into
the next attempt and its launcher told to stop its trainer. Until that trainer has ended, the Pod is observed as its
old attempt's, being stopped; then as no replica at all, so that the planner's usual rule holds: the next attempt
starts only once the whole earlier one is gone. The planner's ``CreateReplica`` for it then starts the script again
in that Pod (a second order), torch already imported, instead of creating a Pod. A new trainer never meets an old
one's store.

Static groups only: an elastic group's agents restart their own workers, and an in-place group is repaired around
its running members. A command of any other form starts cold, as before, and so does every replica whose Pod cannot
restart warm (its container ended, its node is lost): the planner deletes and recreates those.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any

from torchjob import worker_files
from torchjob.api import extensions
from torchjob.api.types import DEFAULT_CONTAINER_NAME, PyTorchJob
from torchjob.backends.kubernetes import observing
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.core import replicas
from torchjob.core.actions import ReorderStop
from torchjob.core.envs import Addressing, replica_env
from torchjob.core.observed import Phase, ReplicaObservation, UnorderedStop
from torchjob.core.policies import warm_starts
from torchjob.core.replicas import ReplicaId
from torchjob.launch.entry import POD_COLD_START, WarmEntry, python_entry

# The launcher, where the image has it (torchjob installed); else the command itself, cold, as without warm starts,
# with the reason in the Pod's log: an image the annotation was wrong about runs the job all the same.
BOOT = (
    "import importlib.util as u,os,runpy,sys\n"
    "if u.find_spec('torchjob') and u.find_spec('torchjob.launch'):"
    "runpy.run_module('torchjob.launch',run_name='__main__')\n"
    f"else:print({POD_COLD_START + 'torchjob is not installed in its image'!r},file=sys.stderr,flush=True);"
    "os.execvp(sys.argv[2],sys.argv[2:])"
)
LAUNCHER = ["-s", "-c", BOOT, "--"]
POD_GRACE_SECONDS = 30.0  # a Pod's terminationGracePeriodSeconds when it sets none
_PYTHON = re.compile(r"python(3(\.\d+)?)?")


def applies(job: PyTorchJob) -> bool:
    return warm_starts.pods(job)


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
    job: PyTorchJob, replica: ReplicaId, attempt: int, addressing: Addressing, at_once: bool, start: bool
) -> worker_files.RestartOrder:
    """The order that stops the trainer of ``replica``'s Pod for ``attempt``, and with ``start`` starts it: the
    attempt's contract variables (those the container does not set itself, as in its Pod's manifest), and how
    long what is left of the old trainer may take to stop."""
    template = job.spec.pytorch_replica_specs[replica.replica_type].template
    spec = template.get("spec") or {}
    trainer = [c for c in spec.get("containers") or [] if c.get("name") == DEFAULT_CONTAINER_NAME]
    own = {e.get("name") for c in trainer for e in c.get("env") or []}
    env = {k: v for k, v in replica_env(job, replica, attempt, addressing) if k not in own}
    # As a Pod's deletion would give it: the job's grace, else the Pod's own, else Kubernetes' default.
    grace = job.annotation(extensions.TERMINATION_GRACE) or spec.get("terminationGracePeriodSeconds")
    seconds = 0.0 if at_once else float(grace) if grace is not None else POD_GRACE_SECONDS
    return worker_files.RestartOrder(attempt=attempt, env=env, grace=seconds, start=start)


def with_trainer(
    board: ReportBoard | None, seen: ReplicaObservation | None, pod: dict[str, Any]
) -> ReplicaObservation | None:
    """A running replica as its launcher tells it: it can restart warm; its trainer's end is the replica's
    failure (the Pod runs on, waiting for orders); relabelled into a later attempt, it is its old attempt's until
    that trainer has ended, then nothing until the start is ordered, then starting. Untouched where no launcher
    spoke."""
    uid = pod["metadata"].get("uid")
    state = board.trainer(uid) if board is not None else None
    if board is None or seen is None or state is None or seen.phase is not Phase.RUNNING:
        return seen
    if seen.stopping or seen.silent_node is not None or seen.disrupted_at is not None:
        return seen  # going (deleted, evicted), or perhaps lost with its node: it starts no attempt again
    if state.attempt > seen.attempt:
        return seen  # cannot be: a launcher starts a later attempt only once its Pod was relabelled
    if state.attempt < seen.attempt:
        order = board.order(uid)
        if order is not None and order["start"]:
            return replace(seen, phase=Phase.PENDING, progress=None, restarts_warm=True)
        if state.exit_code is None:  # the old attempt's trainer still runs: it is being stopped
            return replace(seen, attempt=state.attempt, stopping=True, progress=None)
        return None  # stopped: its place in the new attempt is empty until the planner fills it
    if state.exit_code not in (None, 0):
        ended = replace(seen, phase=Phase.FAILED, exit_code=state.exit_code, finished_at=state.ended_at)
        return replace(ended, progress=None, message=None, restarts_warm=True)
    return replace(seen, restarts_warm=True)


def waits_to_start(board: ReportBoard | None, pod: dict[str, Any] | None, attempt: int) -> bool:
    """Whether ``pod`` was relabelled into ``attempt`` and its launcher's trainer of an earlier attempt has ended:
    it waits for the order that starts ``attempt``."""
    state = board.trainer(pod["metadata"].get("uid")) if board is not None and pod is not None else None
    if pod is None or state is None or pod["metadata"].get("deletionTimestamp"):
        return False
    identity = observing.replica_of(pod)
    return identity is not None and identity[1] == attempt and state.attempt < attempt and state.exit_code is not None


def unordered_stops(board: ReportBoard, pods: list[dict[str, Any]]) -> list[UnorderedStop]:
    """The Pods relabelled into a later attempt whose launcher still runs an earlier trainer with no order
    waiting: the stop was ordered by an operator that has since lost the lead (orders live in the leader's
    memory). One whose trainer has ended needs none: the planner's CreateReplica starts it."""
    found = []
    for pod in pods:
        uid = pod["metadata"].get("uid")
        state, identity = board.trainer(uid), observing.replica_of(pod)
        if state is None or identity is None or pod["metadata"].get("deletionTimestamp") or board.order(uid):
            continue
        replica, attempt = identity
        if state.attempt < attempt and state.exit_code is None:
            found.append(UnorderedStop(replica, attempt))
    return found


def order_stop_again(
    board: ReportBoard, job: PyTorchJob, pod: dict[str, Any], stop: ReorderStop, addressing: Addressing
) -> None:
    """Order again the stop of ``pod``'s earlier trainer (``unordered_stops``); ``addressing``: where the attempt
    it moved into meets (mapping.addressing)."""
    order = restart_order(job, stop.replica, stop.attempt, addressing, at_once=True, start=False)
    board.order_restart(pod["metadata"].get("uid"), order)
