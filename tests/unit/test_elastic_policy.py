"""The elastic policy in the planner: membership changes inside a running attempt are not failures."""

from __future__ import annotations

import signal

from tests.unit.test_planning import at, creates, deletes, step
from torchjob.api.types import PyTorchJob, ReplicaType
from torchjob.core.actions import LeaveGroup
from torchjob.core.envs import Addressing, replica_env
from torchjob.core.replicas import ReplicaId, expected_replicas
from torchjob.testing import failed, make_job, running


def elastic_job(workers: int = 3, low: int = 2, high: int = 4) -> PyTorchJob:
    return make_job("el").workers(workers).elastic(minReplicas=low, maxReplicas=high).build()


def started(job: PyTorchJob) -> PyTorchJob:
    job, result = step(job, [])
    assert creates(result) == [f"worker-{i}@0" for i in range(len(expected_replicas(job)))]
    return job


def scaled(job: PyTorchJob, workers: int) -> PyTorchJob:
    data = job.to_wire()
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
    return PyTorchJob.model_validate(data)


def test_a_lost_worker_above_min_is_a_membership_change_replaced_after_the_delay() -> None:
    job = started(elastic_job())
    lost = failed("worker-1", signal=signal.SIGKILL, at=at(4))
    job, result = step(job, [running("worker-0"), lost, running("worker-2")], at(5))
    assert deletes(result) == ["worker-1@0"]
    assert creates(result) == []
    assert (job.status.attempt, job.status.restart_count, job.status.membership_changes) == (0, 0, 1)
    assert [e.reason for e in result.events] == ["MemberLost"]
    assert "worker-1 was killed by SIGKILL" in result.events[0].message
    assert "carries on with 2 Worker(s) (minReplicas 2)" in result.events[0].message
    assert result.requeue_at == at(15)
    # Before the delay the slot stays empty; after it the replacement joins the running attempt.
    survivors = [running("worker-0"), running("worker-2")]
    job, result = step(job, survivors, at(10))
    assert creates(result) == [] and result.requeue_at == at(15)
    job, result = step(job, survivors, at(15))
    assert creates(result) == ["worker-1@0"]
    assert job.status.membership_changes == 2 and job.status.replacement_due == {}
    assert [e.reason for e in result.events] == ["MemberAdded"]


def test_losing_a_worker_below_min_is_a_failure_of_the_attempt() -> None:
    job = started(elastic_job(workers=2, low=2))
    job, result = step(job, [running("worker-0"), failed("worker-1", signal=signal.SIGKILL, at=at(4))], at(5))
    assert (job.status.attempt, job.status.restart_count, job.status.membership_changes) == (1, 1, 0)
    assert deletes(result) == ["worker-0@0", "worker-1@0"]


def test_a_permanent_failure_is_not_absorbed() -> None:
    job = make_job("el").workers(3).restart_policy("ExitCode").elastic(minReplicas=1, maxReplicas=3).build()
    job = started(job)
    job, _ = step(job, [running("worker-0"), failed("worker-1", exit_code=2, at=at(4)), running("worker-2")], at(5))
    assert job.status.conditions[-1].type.value == "Failed"
    assert job.status.membership_changes == 0


def test_scale_down_stops_the_highest_workers_and_scale_up_starts_new_ones() -> None:
    job = started(elastic_job(workers=4, low=1, high=4))
    all_four = [running(f"worker-{i}") for i in range(4)]
    job, result = step(scaled(job, 2), all_four, at(1))
    assert deletes(result) == ["worker-2@0", "worker-3@0"]
    assert [e.reason for e in result.events] == ["ScaledDown", "ScaledDown"]
    assert job.status.membership_changes == 2
    # While they stop, nothing is asked twice, and their exit is no failure.
    leaving = [running("worker-0"), running("worker-1"), failed("worker-2", stopping=True, at=at(2))]
    job, result = step(job, [*leaving, running("worker-3", stopping=True)], at(2))
    assert result.actions == [] and job.status.restart_count == 0 and job.status.membership_changes == 2
    job, result = step(scaled(job, 3), [running("worker-0"), running("worker-1")], at(3))
    assert creates(result) == ["worker-2@0"]
    assert job.status.membership_changes == 3 and job.status.attempt == 0


def test_the_worker_count_stays_within_min_and_max() -> None:
    job = elastic_job(workers=3, low=2, high=4)
    assert len(expected_replicas(scaled(job, 9))) == 4
    assert len(expected_replicas(scaled(job, 1))) == 2


def test_a_group_restart_forgets_pending_replacements() -> None:
    job = started(elastic_job(workers=3, low=2))
    job, _ = step(
        job, [running("worker-0"), failed("worker-1", signal=signal.SIGKILL, at=at(4)), running("worker-2")], at(5)
    )
    assert "worker-1" in job.status.replacement_due
    job, _ = step(job, [running("worker-0"), failed("worker-2", signal=signal.SIGKILL, at=at(6))], at(6))
    assert job.status.attempt == 1 and job.status.replacement_due == {}


def test_elastic_env_disables_torchruns_shared_store_and_merges_rdzv_conf_defaults() -> None:
    job = (
        make_job("el")
        .workers(2)
        .elastic(minReplicas=1, maxReplicas=2, rdzvConf=[{"key": "last_call_timeout", "value": "9"}])
    )
    addressing = Addressing(
        "h", 1, "h", 2, "el-0", rdzv_conf_defaults=(("is_host", "false"), ("last_call_timeout", "2"))
    )
    env = dict(replica_env(job.build(), ReplicaId(ReplicaType.WORKER, 0), 0, addressing))
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    # The job's own value wins over the backend's default.
    assert env["PET_RDZV_CONF"] == "last_call_timeout=9,is_host=false"
    assert env["PET_NNODES"] == "1:2" and env["PET_RDZV_ID"] == "el-0"


def test_an_elastic_job_that_does_not_start_torchrun_is_warned_about() -> None:
    from torchjob.backends.local.mapping import elastic_launch_problem

    plain = make_job("el").workers(2).elastic(minReplicas=1, maxReplicas=2).command("python", "train.py").build()
    problem = elastic_launch_problem(plain)
    assert problem is not None and problem.startswith("spec.pytorchReplicaSpecs.Worker.template.spec.containers")
    assert "does not start torchrun" in problem
    launched = make_job("el").workers(2).elastic(minReplicas=1).command("python", "-m", "torch.distributed.run", "t.py")
    assert elastic_launch_problem(launched.build()) is None
    assert elastic_launch_problem(make_job("fixed").workers(2).command("python", "t.py").build()) is None


def test_scale_problems_name_the_bound_or_the_missing_policy() -> None:
    from torchjob.sdk.client import scale_problem

    job = elastic_job(workers=2, low=1, high=3)
    assert scale_problem(job, 3) is None
    assert scale_problem(job, 0) == "--workers: must be within the job's elasticPolicy bounds [1, 3], got 0"
    fixed = make_job("fixed").workers(2).build()
    assert "has no spec.elasticPolicy" in (scale_problem(fixed, 3) or "")


def test_after_a_membership_change_the_group_starts_up_again_and_is_not_judged_by_the_step_deadline() -> None:
    """torchrun starts every worker again when the membership changes: until the first step after it, only the
    start-up allowance bounds the wait, however long ago the last step was."""
    from dataclasses import replace

    from torchjob.core.reported import Progress

    job = make_job("el").workers(3).elastic(minReplicas=2, maxReplicas=4)
    job = started(job.annotate(**{"torchjob.io/progress-deadline-seconds": "30"}).build())

    def stepped(name: str, second: float) -> object:
        return replace(running(name), progress=Progress(at(second), 7, alive_at=at(second)))

    lost = failed("worker-1", signal=signal.SIGKILL, at=at(4))
    job, _ = step(job, [stepped("worker-0", 3), lost, stepped("worker-2", 3)], at(5))  # type: ignore[list-item]
    assert job.status.attempts[0].regrouped_time is not None
    waiting = [stepped("worker-0", 3), stepped("worker-2", 3)]
    job, result = step(job, waiting, at(60))  # type: ignore[arg-type]
    assert (job.status.attempt, job.status.restart_count) == (0, 0), job.status.attempts
    assert result.requeue_at is not None and result.requeue_at <= at(5 + 1800)
    # From the group's first step after the change (the replacement's start at 60 s; a step within
    # REGROUP_STEP_MARGIN of it may still be the old group's), the step deadline counts again.
    job, _ = step(job, [stepped("worker-0", 63), stepped("worker-2", 63)], at(94))  # type: ignore[list-item]
    assert job.status.restart_count == 1 and "Hung: no progress for 30s" in str(job.status.attempts[0].outcome)


def test_the_survivors_of_a_worker_lost_with_its_node_are_ordered_out_of_the_group_it_took_with_it() -> None:
    job = started(elastic_job())
    lost = failed("worker-1", exit_code=None, reason="NodeLost", at=at(4))
    job, result = step(job, [running("worker-0"), lost, running("worker-2")], at(5))
    assert deletes(result) == ["worker-1@0"]
    orders = [a for a in result.actions if isinstance(a, LeaveGroup)]
    assert [(str(a.replica), a.attempt) for a in orders] == [("worker-0", 0), ("worker-2", 0)]
    assert all(a.why.startswith("worker-1 was lost with its node") for a in orders)
    assert "its peers are told to leave the group it took with it" in result.events[0].message
    assert (job.status.attempt, job.status.restart_count, job.status.membership_changes) == (0, 0, 1)


def test_a_worker_killed_on_a_live_node_breaks_its_peers_collectives_itself_nobody_is_ordered_out() -> None:
    job = started(elastic_job())
    _, result = step(job, [running("worker-0"), failed("worker-1", signal=signal.SIGKILL), running("worker-2")], at(5))
    assert deletes(result) == ["worker-1@0"]
    assert not any(isinstance(a, LeaveGroup) for a in result.actions)
