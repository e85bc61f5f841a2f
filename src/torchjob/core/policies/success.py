"""Success policy: when has the job as a whole succeeded?

Kubeflow's rule (the default): with a Master, when master-0 succeeds; without one, when every Worker has
succeeded; for an elastic job, when any Worker has (the agents finish together). The torchjob annotation
``torchjob.io/success-policy: AllReplicas`` waits for every replica instead (kubeflow/trainer #1982).
"""

from __future__ import annotations

from torchjob.api import extensions
from torchjob.api.types import ConditionType, PyTorchJob, ReplicaType
from torchjob.core import conditions
from torchjob.core.observed import Phase, ReplicaObservation
from torchjob.core.replicas import expected_replicas, has_master


def job_succeeded(job: PyTorchJob, current: list[ReplicaObservation]) -> bool:
    # A member leaving a running group (an elastic one scaled down) may exit cleanly: that is not the job's end.
    done = {o.replica for o in current if o.phase is Phase.SUCCEEDED and not o.stopping}
    expected = expected_replicas(job)
    if job.annotation(extensions.SUCCESS_POLICY) == "AllReplicas":
        return all(r in done for r in expected)
    if has_master(job):
        return any(r.replica_type is ReplicaType.MASTER for r in done)
    workers = [r for r in expected if r.replica_type is ReplicaType.WORKER]
    if job.spec.elastic_policy is not None:
        return any(r in done for r in workers)
    return bool(workers) and all(r in done for r in workers)


def pending_message(current: list[ReplicaObservation]) -> str | None:
    """Why replicas that have not started yet wait, as the platform says it (a Pod the scheduler cannot place,
    an image that cannot be pulled); None when none says anything."""
    waiting = sorted(f"{o.replica}: {o.message}" for o in current if o.phase is Phase.PENDING and o.message)
    return "Waiting on " + "; ".join(waiting).rstrip(".") + "." if waiting else None


def running_message(job: PyTorchJob, current: list[ReplicaObservation]) -> str | None:
    """What the Running condition says once the whole group is up (None before): "running.", and which
    running replica the platform reports trouble with (its node stopped reporting, say)."""
    phases = {o.replica: o.phase for o in current}
    group_up = all(phases.get(r) in (Phase.RUNNING, Phase.SUCCEEDED) for r in expected_replicas(job))
    if not group_up or not any(p is Phase.RUNNING for p in phases.values()):
        return None
    waiting = [f"{o.replica}: {o.message}" for o in current if o.phase is Phase.RUNNING and o.message]
    return "running." + (" Waiting on " + "; ".join(sorted(waiting)) + "." if waiting else "")


def group_condition(
    job: PyTorchJob, current: list[ReplicaObservation], started: bool, kind_name: str
) -> tuple[ConditionType, str, str] | None:
    """The condition that says where the group is: Running once it is up (with what it waits on), else, before
    it ever ran, never a bare Created: what its replicas wait for (the scheduler's reason, an image pull)."""
    running = running_message(job, current)
    if running is not None:
        return ConditionType.RUNNING, conditions.REASON_RUNNING, f"{kind_name} is {running}"
    pending = pending_message(current)
    if pending is not None and not started:
        return ConditionType.CREATED, conditions.REASON_CREATED, f"{kind_name} is created. {pending}"
    return None
