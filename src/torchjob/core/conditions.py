"""Job conditions exactly as Kubeflow's controller writes them.

Kubeflow's rules (kubeflow/common ``updateJobConditions``): a condition replaces any older one of its type;
Running and Restarting replace each other; reaching Succeeded or Failed turns Running to False. A condition
set again with the same status keeps its ``lastTransitionTime``. ``kubectl get`` shows the last one's type.
"""

from __future__ import annotations

from datetime import datetime

from torchjob.api.types import KIND, ConditionType, JobCondition, JobStatus
from torchjob.core.times import timestamp

REASON_CREATED = f"{KIND}Created"
REASON_RUNNING = f"{KIND}Running"
REASON_RESTARTING = f"{KIND}Restarting"
REASON_SUCCEEDED = f"{KIND}Succeeded"
REASON_FAILED = f"{KIND}Failed"
REASON_SUSPENDED = f"{KIND}Suspended"
REASON_RESUMED = f"{KIND}Resumed"


def find(status: JobStatus, ctype: ConditionType) -> JobCondition | None:
    return next((c for c in status.conditions if c.type == ctype), None)


def is_true(status: JobStatus, ctype: ConditionType) -> bool:
    cond = find(status, ctype)
    return cond is not None and cond.status == "True"


def is_finished(status: JobStatus) -> bool:
    return is_true(status, ConditionType.SUCCEEDED) or is_true(status, ConditionType.FAILED)


def state(status: JobStatus) -> str:
    """What ``kubectl get pytorchjobs`` prints as State: the type of the last condition."""
    return status.conditions[-1].type.value if status.conditions else ""


def has_started(status: JobStatus) -> bool:
    """Whether the job's group ever ran (or restarted): Running or Restarting among its conditions."""
    return any(find(status, c) is not None for c in (ConditionType.RUNNING, ConditionType.RESTARTING))


def set_condition(
    status: JobStatus, ctype: ConditionType, value: str, reason: str, message: str, now: datetime
) -> None:
    """Set a condition in place, following Kubeflow's replacement rules."""
    current = find(status, ctype)
    if current is not None and (current.status, current.reason, current.message) == (value, reason, message):
        return
    stamp = timestamp(now)
    transition = current.last_transition_time if current is not None and current.status == value else stamp
    new = JobCondition(
        type=ctype,
        status=value,
        reason=reason,
        message=message,
        last_update_time=stamp,
        last_transition_time=transition,
    )
    kept = []
    for cond in status.conditions:
        if cond.type == ctype:
            continue
        if {cond.type, ctype} == {ConditionType.RUNNING, ConditionType.RESTARTING}:
            continue
        if ctype in (ConditionType.SUCCEEDED, ConditionType.FAILED) and cond.type == ConditionType.RUNNING:
            cond = cond.model_copy(update={"status": "False"})
        kept.append(cond)
    status.conditions = [*kept, new]


def fail_job(status: JobStatus, namespace: str, name: str, cause: str, now: datetime) -> str:
    """The one way a job is forced to its end, wherever that is decided (the planner's policies, an
    interrupted local controller, an orphan found on read, a spec the operator rejects): one message
    template, Failed and finished at ``now``, no replica counted active. Returns the message."""
    message = f"PyTorchJob {namespace}/{name} has failed because {cause}"
    mark_failed(status, message, now)
    for replica_status in status.replica_statuses.values():
        replica_status.active = 0
    return message


def mark_failed(status: JobStatus, message: str, now: datetime) -> None:
    """Record the job as Failed (reason PyTorchJobFailed) and finished at ``now``."""
    set_condition(status, ConditionType.FAILED, "True", REASON_FAILED, message, now)
    status.completion_time = timestamp(now)
