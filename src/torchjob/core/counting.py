"""The replica counts in a job's status (``replicaStatuses``: active, succeeded, failed, selector per type)."""

from __future__ import annotations

from torchjob.api.types import PyTorchJob, ReplicaStatus, ReplicaType
from torchjob.core.observed import Phase, ReplicaObservation
from torchjob.core.replicas import selector


def replica_counts(
    job: PyTorchJob, current: list[ReplicaObservation], before: dict[ReplicaType, ReplicaStatus]
) -> dict[ReplicaType, ReplicaStatus]:
    """Counts of the current attempt's replicas. ``before``: the counts of a job that has finished. Replicas
    that are cleaned up vanish from what is observed then, so its final succeeded/failed counts only grow."""
    statuses = {}
    for rtype in job.spec.pytorch_replica_specs:
        of_type = [o for o in current if o.replica.replica_type is rtype]
        count = ReplicaStatus(
            active=sum(o.phase.live for o in of_type),
            succeeded=sum(o.phase is Phase.SUCCEEDED for o in of_type),
            failed=sum(o.phase is Phase.FAILED for o in of_type),
            selector=selector(job, rtype),
        )
        earlier = before.get(rtype)
        if earlier is not None:
            count.succeeded = max(count.succeeded or 0, earlier.succeeded or 0)
            count.failed = max(count.failed or 0, earlier.failed or 0)
        statuses[rtype] = count
    return statuses
