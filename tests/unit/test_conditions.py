"""Kubeflow's condition rules: replacement, Running ↔ Restarting, terminal states turn Running off."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from torchjob.api.types import ConditionType as C
from torchjob.api.types import JobStatus
from torchjob.core import conditions
from torchjob.core.conditions import set_condition, state

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def types(status: JobStatus) -> list[tuple[str, str]]:
    return [(c.type.value, c.status) for c in status.conditions]


def test_running_and_restarting_replace_each_other() -> None:
    s = JobStatus()
    set_condition(s, C.CREATED, "True", "PyTorchJobCreated", "created", T0)
    set_condition(s, C.RUNNING, "True", "PyTorchJobRunning", "running", T0)
    set_condition(s, C.RESTARTING, "True", "PyTorchJobRestarting", "restarting", T0)
    assert types(s) == [("Created", "True"), ("Restarting", "True")]
    set_condition(s, C.RUNNING, "True", "PyTorchJobRunning", "running", T0)
    assert types(s) == [("Created", "True"), ("Running", "True")]
    assert state(s) == "Running"


def test_terminal_condition_turns_running_false_and_comes_last() -> None:
    s = JobStatus()
    set_condition(s, C.RUNNING, "True", "PyTorchJobRunning", "running", T0)
    set_condition(s, C.SUCCEEDED, "True", "PyTorchJobSucceeded", "done", T0)
    assert types(s) == [("Running", "False"), ("Succeeded", "True")]
    assert state(s) == "Succeeded"


def test_same_status_keeps_transition_time() -> None:
    s = JobStatus()
    set_condition(s, C.RUNNING, "True", "PyTorchJobRunning", "a", T0)
    set_condition(s, C.RUNNING, "True", "PyTorchJobRunning", "b", T0 + timedelta(seconds=5))
    cond = s.conditions[0]
    assert cond.last_transition_time == "2026-01-01T00:00:00Z"
    assert cond.last_update_time == "2026-01-01T00:00:05Z"
    assert cond.message == "b"


def test_every_forced_end_goes_through_fail_job() -> None:
    """One template and one rule for the planner's failures, interruptions, orphans and rejected specs."""
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    status = JobStatus.model_validate({"replicaStatuses": {"Worker": {"active": 2}, "Master": {"active": 1}}})
    message = conditions.fail_job(status, "team", "mnist", "it was interrupted (SIGINT)", now)
    assert message == "PyTorchJob team/mnist has failed because it was interrupted (SIGINT)"
    assert conditions.state(status) == "Failed" and conditions.is_finished(status)
    assert status.completion_time == "2026-01-01T00:00:00Z"
    assert all(r.active == 0 for r in status.replica_statuses.values())
