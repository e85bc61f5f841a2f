"""Which replicas to remove once a job has finished (cleanPodPolicy), and when to remove the job (TTL).

``None`` keeps every replica, ``Running`` removes the live ones, ``All`` removes all. A Failed job's live
replicas are always stopped, whatever the policy: they belong to a broken DDP group and can only hang
while holding their machines (kubeflow/trainer #1579).
"""

from __future__ import annotations

from datetime import datetime

from torchjob.api.types import CleanPodPolicy, ConditionType, JobStatus, PyTorchJob
from torchjob.core import conditions
from torchjob.core.actions import DeleteJob, DeleteReplica
from torchjob.core.observed import ReplicaObservation, lost_with_node
from torchjob.core.times import later, parse_timestamp


def replicas_to_remove(job: PyTorchJob, status: JobStatus, observed: list[ReplicaObservation]) -> list[DeleteReplica]:
    policy = job.spec.run_policy.clean_pod_policy or CleanPodPolicy.NONE
    failed = conditions.is_true(status, ConditionType.FAILED)
    actions = []
    for o in observed:
        if lost_with_node(o):  # whatever the policy: only its remains are left, Terminating forever otherwise
            actions.append(DeleteReplica(o.replica, o.attempt, "it was lost with its node", final=True, force=True))
            continue
        if o.stopping:
            continue
        if policy is CleanPodPolicy.ALL:
            reason = "cleanPodPolicy All"
        elif o.phase.live and policy is CleanPodPolicy.RUNNING:
            reason = "cleanPodPolicy Running"
        elif o.phase.live and failed:
            reason = "the job failed"
        else:
            continue
        actions.append(DeleteReplica(o.replica, o.attempt, reason, final=True))
    return actions


def ttl_expiry(job: PyTorchJob, status: JobStatus) -> datetime | None:
    ttl = job.spec.run_policy.ttl_seconds_after_finished
    if ttl is None or not status.completion_time:
        return None
    return later(parse_timestamp(status.completion_time), ttl)


def ttl_action(job: PyTorchJob, status: JobStatus, now: datetime) -> tuple[DeleteJob | None, datetime | None]:
    """(DeleteJob, None) once the TTL has passed; (None, expiry) to be woken then; (None, None) without TTL."""
    expiry = ttl_expiry(job, status)
    if expiry is None:
        return None, None
    if now >= expiry:
        ttl = job.spec.run_policy.ttl_seconds_after_finished
        return DeleteJob(f"ttlSecondsAfterFinished ({ttl}s) passed"), None
    return None, expiry
