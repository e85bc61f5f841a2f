"""A TrainJob's status in Trainer's shape, from the status of the PyTorchJob it runs as.

Trainer's TrainJob has three condition types (``Suspended``, ``Complete``, ``Failed``; metav1.Conditions),
``jobsStatus`` (per replicated job of its JobSet: here the one ``node`` job) and ``trainerStatus`` (progress),
which torchjob fills for any script without a feature gate. torchjob's attempts, restarts and repairs stay on
the PyTorchJob (``kubectl get pytorchjob NAME``): Trainer's status has no place for them.
"""

from __future__ import annotations

from typing import Any

from torchjob.api.trainjob.types import NODE
from torchjob.api.types import ConditionType, JobStatus

# The PyTorchJob's condition → the TrainJob's (Trainer has no Created, Running or Restarting condition).
_MAPPED = {
    ConditionType.SUCCEEDED: "Complete",
    ConditionType.FAILED: "Failed",
    ConditionType.SUSPENDED: "Suspended",
}
_RESUMED = "Resumed"


def trainjob_status(child: JobStatus, previous: dict[str, Any], now: str) -> dict[str, Any]:
    """The TrainJob status for ``child`` (the PyTorchJob's status), keeping each condition's transition time
    from ``previous`` (the TrainJob's current status) when it did not change."""
    before = {c.get("type"): c for c in previous.get("conditions") or [] if isinstance(c, dict)}
    conditions = []
    for condition in child.conditions:
        kind = _MAPPED.get(condition.type)
        if kind is None:
            continue
        reason = condition.reason or kind
        if kind == "Suspended" and condition.status == "False":
            reason = _RESUMED
        mapped = {"type": kind, "status": condition.status, "reason": reason, "message": condition.message}
        old = before.get(kind)
        same = old is not None and old.get("status") == mapped["status"]
        mapped["lastTransitionTime"] = old.get("lastTransitionTime", now) if same and old else now
        conditions.append(mapped)
    status: dict[str, Any] = {"conditions": conditions, "jobsStatus": [_node_job(child)]}
    if child.trainer_status is not None:
        status["trainerStatus"] = child.trainer_status.model_dump(by_alias=True, exclude_none=True, mode="json")
    return status


def _node_job(child: JobStatus) -> dict[str, Any]:
    """The ``node`` job as Trainer counts its child Jobs: one, active until the group is done."""
    true = {c.type for c in child.conditions if c.status == "True"}
    succeeded = int(ConditionType.SUCCEEDED in true)
    failed = int(ConditionType.FAILED in true)
    suspended = int(ConditionType.SUSPENDED in true and not succeeded and not failed)
    running = int(ConditionType.RUNNING in true and not (succeeded or failed or suspended))
    active = int(not (succeeded or failed or suspended))
    return {
        "name": NODE,
        "ready": running,
        "succeeded": succeeded,
        "failed": failed,
        "active": active,
        "suspended": suspended,
    }
