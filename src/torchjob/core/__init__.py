"""The pure planner: from (job, observed replicas, now) to actions and the job's new status. No I/O, no clock."""

from torchjob.core.actions import CreateReplica, DeleteJob, DeleteReplica, Event, Plan
from torchjob.core.observed import Phase, ReplicaObservation
from torchjob.core.planning import plan

__all__ = [
    "CreateReplica",
    "DeleteJob",
    "DeleteReplica",
    "Event",
    "Phase",
    "Plan",
    "ReplicaObservation",
    "plan",
]
