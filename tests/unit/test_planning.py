"""The planner, one policy at a time: (job, observed, now) → actions and status."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from torchjob.api.types import ConditionType, PyTorchJob
from torchjob.core import conditions
from torchjob.core.actions import CreateReplica, DeleteJob, DeleteReplica, Plan
from torchjob.core.observed import Observed, Platform, ReplicaObservation
from torchjob.core.planning import plan
from torchjob.core.policies import elastic
from torchjob.core.reported import Progress
from torchjob.core.times import timestamp
from torchjob.testing import failed, make_job, pending, running, succeeded

T0 = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def step(job: PyTorchJob, observed: list[ReplicaObservation], now: datetime = T0) -> tuple[PyTorchJob, Plan]:
    # A job that needs torchjob's rendezvous store has it running here (its lifecycle has tests of its own).
    result = plan(job, Observed(observed, store_running=elastic.hosts_rendezvous_store(job)), Platform(), now)
    return job.model_copy(update={"status": result.status}), result


def creates(result: Plan) -> list[str]:
    return [f"{a.replica}@{a.attempt}" for a in result.actions if isinstance(a, CreateReplica)]


def deletes(result: Plan) -> list[str]:
    return sorted(f"{a.replica}@{a.attempt}" for a in result.actions if isinstance(a, DeleteReplica))


def cond(job: PyTorchJob, ctype: ConditionType) -> tuple[str, str, str] | None:
    c = conditions.find(job.status, ctype)
    return None if c is None else (c.status, c.reason, c.message)


def three() -> PyTorchJob:
    return make_job("mnist").master().workers(2).build()


ALL_RUNNING = [running("master-0"), running("worker-0"), running("worker-1")]


# -- creation and running --------------------------------------------------------------------------------


def test_new_job_creates_every_replica_master_first_and_records_created() -> None:
    job, result = step(three(), [])
    assert creates(result) == ["master-0@0", "worker-0@0", "worker-1@0"]
    assert cond(job, ConditionType.CREATED) == (
        "True",
        "PyTorchJobCreated",
        "PyTorchJob default/mnist is created.",
    )
    assert job.status.start_time == timestamp(T0)
    assert [a.attempt for a in job.status.attempts] == [0]


def test_running_when_the_whole_group_runs() -> None:
    job, _ = step(three(), [])
    job, result = step(job, [running("master-0"), pending("worker-0"), running("worker-1")], at(1))
    assert cond(job, ConditionType.RUNNING) is None
    job, result = step(job, ALL_RUNNING, at(2))
    assert cond(job, ConditionType.RUNNING) == (
        "True",
        "PyTorchJobRunning",
        "PyTorchJob default/mnist is running.",
    )
    assert conditions.state(job.status) == "Running"
    assert job.status.replica_statuses["Worker"].active == 2  # type: ignore[index]
    assert result.actions == []


def test_unchanged_status_is_not_rewritten() -> None:
    job, _ = step(three(), [])
    job, _ = step(job, ALL_RUNNING, at(1))
    _, result = step(job, ALL_RUNNING, at(50))
    assert result.status == job.status


# -- success -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("builder", "observed", "done"),
    [
        (
            make_job().master().workers(2),
            [succeeded("master-0"), running("worker-0"), running("worker-1")],
            True,
        ),
        (
            make_job().master().workers(2),
            [running("master-0"), succeeded("worker-0"), succeeded("worker-1")],
            False,
        ),
        (make_job().workers(2), [succeeded("worker-0"), running("worker-1")], False),
        (make_job().workers(2), [succeeded("worker-0"), succeeded("worker-1")], True),
        (
            make_job().master().workers(1).annotate(**{"torchjob.io/success-policy": "AllReplicas"}),
            [succeeded("master-0"), running("worker-0")],
            False,
        ),
        (
            make_job().master().workers(1).annotate(**{"torchjob.io/success-policy": "AllReplicas"}),
            [succeeded("master-0"), succeeded("worker-0")],
            True,
        ),
        (make_job().workers(2).elastic(minReplicas=1, maxReplicas=2), [succeeded("worker-1")], True),
    ],
    ids=[
        "master-decides",
        "workers-alone-do-not",
        "worker-only-needs-all",
        "worker-only-all",
        "all-replicas-waits",
        "all-replicas-done",
        "elastic-any-worker",
    ],
)
def test_success_policies(builder: object, observed: list[ReplicaObservation], done: bool) -> None:
    job, _ = step(builder.build(), [])  # type: ignore[attr-defined]
    job, _ = step(job, observed, at(5))
    assert conditions.is_true(job.status, ConditionType.SUCCEEDED) is done
    if done:
        assert job.status.completion_time == timestamp(at(5))
        assert cond(job, ConditionType.SUCCEEDED)[1] == "PyTorchJobSucceeded"  # type: ignore[index]


def test_succeeded_turns_running_false_and_keeps_workers_under_clean_pod_policy_none() -> None:
    job, _ = step(three(), [])
    job, _ = step(job, ALL_RUNNING, at(1))
    job, result = step(job, [succeeded("master-0"), running("worker-0"), running("worker-1")], at(9))
    assert cond(job, ConditionType.RUNNING)[0] == "False"  # type: ignore[index]
    assert conditions.state(job.status) == "Succeeded"
    assert deletes(result) == []


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("None", []), ("Running", ["worker-0@0"]), ("All", ["master-0@0", "worker-0@0"])],
)
def test_clean_pod_policy_after_success(policy: str, expected: list[str]) -> None:
    job, _ = step(make_job().master().workers(1).run_policy(cleanPodPolicy=policy).build(), [])
    _, result = step(job, [succeeded("master-0"), running("worker-0")], at(3))
    assert deletes(result) == expected


# -- failures and restarts ---------------------------------------------------------------------------------


def test_on_failure_restarts_the_whole_group_as_a_new_attempt() -> None:
    job, _ = step(three(), [])
    job, _ = step(job, ALL_RUNNING, at(1))
    observed = [
        running("master-0"),
        running("worker-0"),
        failed("worker-1", exit_code=1, message="ValueError: x"),
    ]
    job, result = step(job, observed, at(2))
    assert deletes(result) == ["master-0@0", "worker-0@0", "worker-1@0"]
    assert creates(result) == []  # names are still held by the old attempt
    assert job.status.attempt == 1 and job.status.restart_count == 1
    status, reason, message = cond(job, ConditionType.RESTARTING)  # type: ignore[misc]
    assert (status, reason) == ("True", "PyTorchJobRestarting")
    assert "worker-1 exited with code 1: ValueError: x" in message
    assert cond(job, ConditionType.RUNNING) is None  # Restarting replaced it
    assert job.status.attempts[0].outcome == "worker-1 exited with code 1: ValueError: x"

    # Old replicas still stopping: nothing new yet. Once gone: attempt 1 starts with the full group.
    stopping = [running("master-0", stopping=True), running("worker-0", stopping=True)]
    job, result = step(job, stopping, at(3))
    assert creates(result) == [] and deletes(result) == []
    job, result = step(job, [], at(4))
    assert creates(result) == ["master-0@1", "worker-0@1", "worker-1@1"]
    job, _ = step(job, [running("master-0", 1), running("worker-0", 1), running("worker-1", 1)], at(5))
    assert conditions.state(job.status) == "Running"
    assert cond(job, ConditionType.RESTARTING) is None


@pytest.mark.parametrize(
    ("policy", "failure", "retried", "says"),
    [
        ("ExitCode", failed("worker-1", exit_code=1), False, "worker-1 exited with code 1"),
        ("ExitCode", failed("worker-1", exit_code=127), False, "exited with code 127"),
        ("ExitCode", failed("worker-1", signal=9), True, "worker-1 was killed by SIGKILL"),
        ("ExitCode", failed("worker-1", exit_code=137), True, "exited with code 137 (SIGKILL)"),
        ("ExitCode", failed("master-0", exit_code=143), True, "master-0 exited with code 143 (SIGTERM)"),
        ("ExitCode", failed("worker-0", exit_code=137, reason="OOMKilled"), True, "worker-0 was OOMKilled"),
        ("Never", failed("worker-1", signal=9), False, "killed by SIGKILL"),
        ("Never", failed("worker-1", exit_code=1, reason="Evicted"), True, "worker-1 was Evicted"),
        ("OnFailure", failed("worker-1", exit_code=1), True, "exited with code 1"),
        ("Always", failed("worker-1", exit_code=2), True, "exited with code 2"),
    ],
)
def test_restart_policies(policy: str, failure: ReplicaObservation, retried: bool, says: str) -> None:
    job, _ = step(make_job("j").master().workers(2).restart_policy(policy).build(), [])
    others = [o for o in ALL_RUNNING if o.replica != failure.replica]
    job, result = step(job, [*others, failure], at(3))
    if retried:
        assert conditions.state(job.status) == "Restarting"
        assert says in cond(job, ConditionType.RESTARTING)[2]  # type: ignore[index]
        assert job.status.attempt == 1
    else:
        assert conditions.state(job.status) == "Failed"
        _status, reason, message = cond(job, ConditionType.FAILED)  # type: ignore[misc]
        assert reason == "PyTorchJobFailed" and says in message
        # A failed job's live replicas are stopped whatever cleanPodPolicy says (kubeflow/trainer #1579).
        assert deletes(result) == sorted(f"{o.replica}@0" for o in others)


def test_root_cause_is_the_first_failure_not_the_peers_that_followed() -> None:
    # worker-1 is SIGKILLed; a second later master-0 dies with exit 1 (connection reset by peer).
    # Under ExitCode the root cause is retryable, so the group restarts instead of failing.
    job, _ = step(make_job("j").master().workers(2).restart_policy("ExitCode").build(), [])
    observed = [
        failed("master-0", exit_code=1, message="RuntimeError: Connection closed by peer", at=at(11)),
        running("worker-0"),
        failed("worker-1", signal=9, at=at(10)),
    ]
    job, _ = step(job, observed, at(12))
    assert conditions.state(job.status) == "Restarting"
    assert "worker-1 was killed by SIGKILL" in cond(job, ConditionType.RESTARTING)[2]  # type: ignore[index]


def test_a_peer_that_lost_its_connection_in_the_same_second_is_not_the_root_cause() -> None:
    # A Pod's finish time has a resolution of one second: the killed rank and its peer often tie.
    job, _ = step(make_job("j").master().workers(2).restart_policy("ExitCode").build(), [])
    observed = [
        failed("master-0", exit_code=1, message="[rank0]: RuntimeError: Connection reset by peer", at=at(10)),
        running("worker-0"),
        failed("worker-1", exit_code=137, at=at(10)),
    ]
    job, _ = step(job, observed, at(12))
    assert conditions.state(job.status) == "Restarting"
    assert "worker-1 exited with code 137" in cond(job, ConditionType.RESTARTING)[2]  # type: ignore[index]


def test_a_peer_that_lost_its_connection_waits_for_the_rank_it_lost_to_be_seen_failing() -> None:
    # master-0's Pod is seen ended first (each Pod's end is reported on its own); worker-1, SIGKILLed in the same
    # second, still reads as running. Nothing is decided until worker-1 can have been seen, or the hold ends.
    job, _ = step(make_job("j").master().workers(2).restart_policy("ExitCode").build(), [])
    job, _ = step(job, ALL_RUNNING, at(5))
    lost_peer = failed("master-0", exit_code=1, message="[rank0]: RuntimeError: Connection closed by peer", at=at(10))
    held, result = step(job, [lost_peer, running("worker-0"), running("worker-1")], at(11))
    assert conditions.state(held.status) == "Running" and held.status.attempt == 0
    assert result.actions == [] and result.requeue_at == at(13)  # PEER_REPORT_SECONDS after its end
    seen, _ = step(held, [lost_peer, running("worker-0"), failed("worker-1", exit_code=137, at=at(10))], at(12))
    assert conditions.state(seen.status) == "Restarting"
    assert "worker-1 exited with code 137" in cond(seen, ConditionType.RESTARTING)[2]  # type: ignore[index]
    # A rank that never shows a failure (hung, or on a silent node) holds the verdict no longer: master-0's own
    # failure is the root cause then, and under ExitCode its code 1 is permanent.
    later, _ = step(held, [lost_peer, running("worker-0"), running("worker-1")], at(13))
    assert conditions.state(later.status) == "Failed"
    assert "master-0 exited with code 1" in cond(later, ConditionType.FAILED)[2]  # type: ignore[index]


def test_the_rank_a_peer_lost_is_the_root_cause_even_when_its_end_was_recorded_after_the_peers() -> None:
    # Locally a killed process's end is noted when it is reaped: its peer's lost-connection exit can come first.
    job, _ = step(make_job("j").master().workers(2).restart_policy("ExitCode").build(), [])
    observed = [
        failed("master-0", exit_code=1, message="RuntimeError: Connection reset by peer", at=at(10)),
        running("worker-0"),
        failed("worker-1", exit_code=137, at=at(10.4)),
    ]
    job, _ = step(job, observed, at(11))
    assert conditions.state(job.status) == "Restarting"
    assert "worker-1 exited with code 137" in cond(job, ConditionType.RESTARTING)[2]  # type: ignore[index]


def test_a_failure_long_after_a_peers_lost_connection_is_not_its_root_cause() -> None:
    # Past the hold the lost-peer failure stands: a later, unrelated failure does not take its place.
    job, _ = step(make_job("j").master().workers(2).restart_policy("ExitCode").build(), [])
    observed = [
        failed("master-0", exit_code=1, message="RuntimeError: Connection reset by peer", at=at(10)),
        running("worker-0"),
        failed("worker-1", exit_code=137, at=at(14)),
    ]
    job, _ = step(job, observed, at(15))
    assert conditions.state(job.status) == "Failed"
    assert "master-0 exited with code 1" in cond(job, ConditionType.FAILED)[2]  # type: ignore[index]


def test_backoff_limit_counts_every_group_restart() -> None:
    job = make_job("j").master().workers(1).restart_policy("ExitCode").run_policy(backoffLimit=1).build()
    job, _ = step(job, [])
    job, _ = step(job, [running("master-0"), failed("worker-0", signal=9)], at(1))
    assert job.status.restart_count == 1
    job, _ = step(job, [], at(2))
    job, _ = step(job, [running("master-0", 1), failed("worker-0", 1, exit_code=137)], at(3))
    assert conditions.state(job.status) == "Failed"
    message = cond(job, ConditionType.FAILED)[2]  # type: ignore[index]
    assert "reached the specified backoff limit (1 restarts)" in message
    assert "worker-0 exited with code 137" in message


def test_unset_backoff_limit_defaults_to_six() -> None:
    job, _ = step(make_job("j").workers(1).build(), [])
    job = job.model_copy(update={"status": job.status.model_copy(update={"restart_count": 6})})
    job, _ = step(job, [failed("worker-0")], at(1))
    assert conditions.state(job.status) == "Failed"


def test_evictions_restart_without_counting_against_backoff() -> None:
    job, _ = step(make_job("j").workers(1).run_policy(backoffLimit=0).build(), [])
    job, _ = step(job, [failed("worker-0", exit_code=137, reason="Evicted")], at(1))
    assert conditions.state(job.status) == "Restarting"
    assert (job.status.attempt, job.status.restart_count) == (1, 0)


def test_failed_is_sticky() -> None:
    job, _ = step(make_job("j").workers(1).restart_policy("Never").build(), [])
    job, _ = step(job, [failed("worker-0")], at(1))
    job, result = step(job, [running("worker-0", 1)], at(2))
    assert conditions.state(job.status) == "Failed"
    assert creates(result) == []


def test_stale_attempt_replicas_are_removed() -> None:
    job, _ = step(three(), [])
    job = job.model_copy(update={"status": job.status.model_copy(update={"attempt": 2})})
    _, result = step(job, [running("worker-0", 1)], at(1))
    assert "worker-0@1" in deletes(result)
    assert "worker-0@2" not in creates(result)  # its name is still taken


# -- deadline, TTL, suspend --------------------------------------------------------------------------------


def test_active_deadline_requeues_at_the_deadline_then_fails() -> None:
    job, result = step(make_job("j").workers(2).run_policy(activeDeadlineSeconds=30).build(), [], T0)
    assert result.requeue_at == at(30)
    job, result = step(job, [running("worker-0"), running("worker-1")], at(29))
    assert result.requeue_at == at(30) and conditions.state(job.status) == "Running"
    job, result = step(job, [running("worker-0"), running("worker-1")], at(30))
    assert conditions.state(job.status) == "Failed"
    assert "active longer than the specified deadline (30s)" in cond(job, ConditionType.FAILED)[2]  # type: ignore[index]
    assert deletes(result) == ["worker-0@0", "worker-1@0"]
    assert any(e.reason == "DeadlineExceeded" for e in result.events)


def test_ttl_after_finished() -> None:
    job, _ = step(make_job("j").workers(1).run_policy(ttlSecondsAfterFinished=60).build(), [])
    job, result = step(job, [succeeded("worker-0")], at(10))
    assert result.requeue_at == at(70)
    _, result = step(job, [succeeded("worker-0")], at(69))
    assert not any(isinstance(a, DeleteJob) for a in result.actions)
    _, result = step(job, [succeeded("worker-0")], at(70))
    assert any(isinstance(a, DeleteJob) for a in result.actions)


def test_suspend_stops_everything_and_resume_starts_a_fresh_group() -> None:
    builder = make_job("j").master().workers(1)
    job, _ = step(builder.build(), [])
    job, _ = step(job, [running("master-0"), running("worker-0")], at(1))
    suspended = builder.run_policy(suspend=True).build().model_copy(update={"status": job.status})
    job, result = step(suspended, [running("master-0"), running("worker-0")], at(2))
    assert deletes(result) == ["master-0@0", "worker-0@0"]
    assert cond(job, ConditionType.SUSPENDED) == (
        "True",
        "PyTorchJobSuspended",
        "PyTorchJob default/j is suspended.",
    )
    assert cond(job, ConditionType.RUNNING)[0] == "False"  # type: ignore[index]
    assert job.status.start_time is None
    job, result = step(job, [], at(3))
    assert result.actions == []

    resumed = builder.run_policy(suspend=False).build().model_copy(update={"status": job.status})
    job, result = step(resumed, [], at(4))
    assert cond(job, ConditionType.SUSPENDED)[:2] == ("False", "PyTorchJobResumed")  # type: ignore[index]
    assert creates(result) == ["master-0@1", "worker-0@1"]
    assert job.status.start_time == timestamp(at(4)) and job.status.restart_count == 0


# -- hang detection and preemption ----------------------------------------------------------------------


def progressing(name: str, seconds: float, step: int, attempt: int = 0) -> ReplicaObservation:
    from dataclasses import replace

    return replace(running(name, attempt), progress=Progress(at(seconds), step))


def test_a_group_without_progress_for_the_deadline_is_hung_and_restarts() -> None:
    job = make_job("h").master().workers(2).annotate(**{"torchjob.io/progress-deadline-seconds": "30"}).build()
    job, _ = step(job, [])
    job, result = step(
        job,
        [progressing("master-0", 10, 118), progressing("worker-0", 11, 118), progressing("worker-1", 9, 117)],
        at(20),
    )
    assert conditions.state(job.status) == "Running"
    assert result.requeue_at == at(41)  # the newest heartbeat + the deadline
    job, result = step(
        job,
        [progressing("master-0", 10, 118), progressing("worker-0", 11, 118), progressing("worker-1", 9, 117)],
        at(41),
    )
    assert conditions.state(job.status) == "Restarting"
    message = cond(job, ConditionType.RESTARTING)[2]  # type: ignore[index]
    assert "Hung: no progress for 30s" in message
    assert "worker-1 stopped at step 117 (silent for 32s), the others at step 118" in message
    assert any(e.reason == "Hung" for e in result.events)
    assert job.status.restart_count == 1
    assert deletes(result) == ["master-0@0", "worker-0@0", "worker-1@0"]
    # They wait in a collective that will not end: stopped at once and removed without waiting for a kubelet.
    assert all(a.at_once and a.force for a in result.actions if isinstance(a, DeleteReplica))


def test_a_slow_start_is_bounded_by_the_start_up_allowance_never_by_the_progress_deadline() -> None:
    deadlines = {"torchjob.io/progress-deadline-seconds": "30", "torchjob.io/startup-deadline-seconds": "120"}
    job = make_job("h").workers(1).annotate(**deadlines).build()
    job, _ = step(job, [])
    job, result = step(job, [running("worker-0")], at(100))  # long past the progress deadline: still starting
    assert conditions.state(job.status) == "Running" and result.requeue_at == at(120)
    job, _ = step(job, [running("worker-0")], at(121))
    message = cond(job, ConditionType.RESTARTING)[2]  # type: ignore[index]
    assert "no step completed within 120s of the attempt's start (start-up allowance" in message

    # Without the annotation the allowance is 30 minutes; from the first step on, the progress deadline counts.
    slow = make_job("s").workers(1).annotate(**{"torchjob.io/progress-deadline-seconds": "30"}).build()
    slow, _ = step(slow, [])
    slow, result = step(slow, [running("worker-0")], at(1799))
    assert conditions.state(slow.status) == "Running" and result.requeue_at == at(1800)
    slow, result = step(slow, [progressing("worker-0", 1799, 1)], at(1800))
    assert conditions.state(slow.status) == "Running" and result.requeue_at == at(1829)
    slow, _ = step(slow, [progressing("worker-0", 1799, 1)], at(1830))
    assert "Hung: no progress for 30s" in cond(slow, ConditionType.RESTARTING)[2]  # type: ignore[index]

    plain, _ = step(make_job("p").workers(1).build(), [])
    plain, _ = step(plain, [running("worker-0")], at(10_000))
    assert conditions.state(plain.status) == "Running"


def test_where_reports_cannot_be_heard_the_deadline_is_not_enforced_and_the_job_is_told_once() -> None:
    job = make_job("h").workers(1).annotate(**{"torchjob.io/progress-deadline-seconds": "30"}).build()
    first = plan(job, Observed([]), Platform(reports_progress=False), T0)
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "ProgressUnreported")]
    assert "--report-address" in first.events[0].message
    job = job.model_copy(update={"status": first.status})
    later = plan(job, Observed([running("worker-0")]), Platform(reports_progress=False), at(10_000))
    assert conditions.state(later.status) == "Running" and later.requeue_at is None
    assert not any(e.reason == "ProgressUnreported" for e in later.events)  # once


def test_preemption_restarts_without_counting_and_says_so() -> None:
    job, _ = step(make_job("p").master().workers(1).run_policy(backoffLimit=0).build(), [])
    job, _ = step(job, [running("master-0"), failed("worker-0", exit_code=143, reason="Preempted")], at(5))
    assert (conditions.state(job.status), job.status.restart_count, job.status.attempt) == ("Restarting", 0, 1)
    assert "worker-0 was preempted" in job.status.attempts[0].outcome  # type: ignore[operator]


def test_a_peer_crashing_while_a_preempted_replica_saves_is_collateral_not_the_root_cause() -> None:
    job, _ = step(make_job("p").master().workers(2).run_policy(backoffLimit=0).build(), [])
    saving = replace(running("worker-0"), reason="Preempted", disrupted_at=at(3))
    crashed = failed("worker-1", signal=6, at=at(4))  # SIGABRT: the group went away under it
    job, _ = step(job, [running("master-0"), saving, crashed], at(5))
    assert (conditions.state(job.status), job.status.restart_count, job.status.attempt) == ("Restarting", 0, 1)
    assert "worker-0 was preempted" in job.status.attempts[0].outcome  # type: ignore[operator]

    # Without the notice, the same crash is the root cause and counts against backoffLimit 0.
    job, _ = step(make_job("q").master().workers(2).run_policy(backoffLimit=0).build(), [])
    job, _ = step(job, [running("master-0"), running("worker-0"), crashed], at(5))
    assert conditions.state(job.status) == "Failed"
    assert "worker-1 was killed by SIGABRT" in cond(job, ConditionType.FAILED)[2]  # type: ignore[index]


def test_a_replica_that_vanishes_from_a_running_group_restarts_it_without_counting() -> None:
    job, _ = step(three(), [])
    job, _ = step(job, ALL_RUNNING, at(1))
    assert cond(job, ConditionType.RUNNING) is not None
    job, result = step(job, [running("master-0"), running("worker-0")], at(2))  # worker-1's Pod was deleted
    assert (job.status.attempt, job.status.restart_count) == (1, 0)
    assert deletes(result) == ["master-0@0", "worker-0@0"]
    restarting = cond(job, ConditionType.RESTARTING)
    assert restarting is not None and "worker-1 vanished while the group was running" in restarting[2]


def test_a_replica_evicted_then_gone_is_reported_as_evicted_not_vanished() -> None:
    """On a real node the evicted Pod is deleted within a second of its DisruptionTarget: the planner keeps
    the notice in the attempt's record, so the root cause survives the Pod."""
    job, _ = step(three(), [])
    job, _ = step(job, ALL_RUNNING, at(1))
    evicted = replace(running("worker-1"), reason="Evicted", disrupted_at=at(2))
    job, _ = step(job, [running("master-0"), running("worker-0"), evicted], at(2))
    assert job.status.attempts[0].disrupted == {"worker-1": "Evicted"}
    job, result = step(job, [running("master-0"), running("worker-0")], at(3))  # its Pod is gone
    assert (job.status.attempt, job.status.restart_count) == (1, 0)
    assert deletes(result) == ["master-0@0", "worker-0@0"]
    assert job.status.attempts[0].outcome == "worker-1 was Evicted"


def test_the_running_message_names_a_replica_whose_node_stopped_reporting() -> None:
    job, _ = step(three(), [])
    lost = replace(running("worker-0"), message="node n1 is not ready (NodeStatusUnknown since T0)")
    job, _ = step(job, [running("master-0"), lost, running("worker-1")], at(1))
    found = cond(job, ConditionType.RUNNING)
    assert found is not None
    assert found[2].endswith("is running. Waiting on worker-0: node n1 is not ready (NodeStatusUnknown since T0).")


def test_a_replica_lost_with_its_node_restarts_the_group_at_once_uncounted_and_its_pod_goes_by_force() -> None:
    job, _ = step(three(), [])
    job, _ = step(job, ALL_RUNNING, at(1))
    lost = failed("worker-1", exit_code=None, reason="NodeLost", message="node n2 stopped reporting", at=at(5))
    job, result = step(job, [running("master-0"), running("worker-0"), lost], at(20))
    assert conditions.state(job.status) == "Restarting"
    assert (job.status.restart_count, job.status.attempt) == (0, 1)  # the platform's doing: not counted
    assert job.status.attempts[0].outcome == "worker-1 was lost with its node: node n2 stopped reporting"
    stops = [a for a in result.actions if isinstance(a, DeleteReplica)]
    # The survivors wait in a collective on a peer that will never answer: no grace period to wait out.
    assert sorted(str(a.replica) for a in stops) == ["master-0", "worker-0", "worker-1"]
    assert all(a.at_once for a in stops)
    # The lost Pod stays Terminating (no kubelet confirms it): it is asked again, and the next attempt waits.
    still = replace(lost, stopping=True)
    job, result = step(job, [replace(running("master-0"), stopping=True), still], at(21))
    assert deletes(result) == ["worker-1@0"] and creates(result) == []
    job, result = step(job, [], at(22))
    assert creates(result) == ["master-0@1", "worker-0@1", "worker-1@1"]


def test_replicas_not_yet_seen_at_start_up_are_not_vanished() -> None:
    job, _ = step(three(), [])
    job, result = step(job, [running("master-0"), pending("worker-0")], at(1))
    assert job.status.attempt == 0 and creates(result) == ["worker-1@0"]


def test_a_group_that_cannot_start_says_what_it_waits_for_never_a_bare_created() -> None:
    from dataclasses import replace

    from torchjob.testing import pending

    job, _ = step(make_job("gpu").master().workers(1).build(), [])
    unplaced = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    waiting = [replace(pending("master-0"), message=unplaced), pending("worker-0")]
    job, _ = step(job, waiting, at(5))
    created = cond(job, ConditionType.CREATED)
    assert conditions.state(job.status) == "Created" and created is not None
    assert created[2] == f"PyTorchJob default/gpu is created. Waiting on master-0: {unplaced}"
    job, _ = step(job, [running("master-0"), running("worker-0")], at(9))
    assert conditions.state(job.status) == "Running"


@pytest.mark.parametrize(
    ("lost", "at_once"),
    [
        (failed("worker-1", exit_code=1, message="ValueError: x"), True),  # a crash: the others are in a broken group
        (failed("worker-1", exit_code=None, signal=9), True),
        (failed("worker-1", exit_code=143, reason="Preempted"), False),  # they agreed to stop: may still be saving
        (failed("worker-1", exit_code=143, reason="Evicted"), False),
    ],
)
def test_a_group_restart_stops_the_survivors_at_once_unless_they_are_leaving_by_agreement(
    lost: ReplicaObservation, at_once: bool
) -> None:
    job, _ = step(three(), [])
    job, _ = step(job, ALL_RUNNING, at(1))
    job, result = step(job, [running("master-0"), running("worker-0"), lost], at(2))
    survivors = [a for a in result.actions if isinstance(a, DeleteReplica) and str(a.replica) != "worker-1"]
    assert [str(a.replica) for a in survivors] == ["master-0", "worker-0"]
    assert all(a.at_once is at_once for a in survivors), survivors
