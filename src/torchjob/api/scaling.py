"""Changing an elastic job's Worker count: whether a count is allowed, and the job with that count.

The only change to a spec torchjob makes after a job was created (``torchjob scale``): the SDK checks a
request with these rules before sending it, and the local controller applies it with ``with_workers``.
"""

from __future__ import annotations

from torchjob.api.types import PyTorchJob, ReplicaType


def workers_problem(job: PyTorchJob, workers: int) -> str | None:
    """Why ``job`` can never have ``workers`` Workers, in one line; None when its elasticPolicy allows it."""
    elastic = job.spec.elastic_policy
    if elastic is None:
        return (
            f"job {job.name!r} has no spec.elasticPolicy: a fixed DDP group cannot change size while it runs; "
            "add elasticPolicy (minReplicas, maxReplicas) and launch with torchrun"
        )
    low, high = elastic.min_replicas or 1, elastic.max_replicas or workers
    if not low <= workers <= high:
        return f"--workers: must be within the job's elasticPolicy bounds [{low}, {high}], got {workers}"
    return None


def with_workers(job: PyTorchJob, workers: int) -> PyTorchJob:
    """``job`` with ``workers`` Workers (a new object; the spec's other fields as they were)."""
    changed = job.model_copy(deep=True)
    changed.spec.pytorch_replica_specs[ReplicaType.WORKER].replicas = workers
    return changed
