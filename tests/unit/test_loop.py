"""The reconcile loop on a fake platform and a fake clock: when it writes, when it wakes, when it is done."""

from __future__ import annotations

from datetime import timedelta

from torchjob.api.types import ConditionType
from torchjob.controller.local_driver import run_until_done
from torchjob.controller.loop import ACTED_REQUEUE, PassResult, reconcile_once
from torchjob.core import conditions
from torchjob.core.actions import CreateRendezvousStore, CreateReplica, DeleteRendezvousStore, DeleteReplica
from torchjob.core.times import timestamp
from torchjob.testing import FakeBackend, FakeClock, make_job


def test_a_pass_that_started_replicas_looks_again_soon() -> None:
    """So the status (and `torchjob list`) says Running as soon as the replicas run."""
    backend = FakeBackend()
    result = reconcile_once(make_job("j").master().workers(1).build(), backend, backend.clock)
    assert any(isinstance(a, CreateReplica) for a in backend.executed)
    assert result.requeue_at is not None and result.requeue_at <= backend.clock.now() + ACTED_REQUEUE


def test_a_quiet_pass_neither_hurries_nor_writes() -> None:
    backend = FakeBackend()
    job = reconcile_once(make_job("j").master().workers(1).build(), backend, backend.clock).job
    job = reconcile_once(job, backend, backend.clock).job  # now Running
    written, executed = len(backend.statuses), len(backend.executed)
    quiet = reconcile_once(job, backend, backend.clock)
    assert (len(backend.statuses), len(backend.executed)) == (written, executed)
    assert quiet.requeue_at is None or quiet.requeue_at > backend.clock.now() + timedelta(seconds=1)


def test_the_loop_runs_a_job_to_success_and_stops_once_nothing_is_live() -> None:
    backend = FakeBackend()

    def replicas_finish(result: PassResult) -> None:
        if backend.live == ["master-0@0", "worker-0@0"] and conditions.state(result.job.status) == "Running":
            backend.finish("worker-0")
            backend.finish("master-0")

    job = run_until_done(make_job("j").master().workers(1).build(), backend, backend.clock, on_pass=replicas_finish)
    assert conditions.state(job.status) == "Succeeded"
    assert backend.live == []
    # One status write per change, never one for a pass that changed nothing.
    states = [conditions.state(s) for s in backend.statuses]
    assert states == sorted(set(states), key=states.index)
    assert states[-1] == "Succeeded"


def test_a_failed_job_is_done_only_after_its_live_replicas_are_stopped() -> None:
    backend = FakeBackend()
    passes: list[PassResult] = []

    def worker_fails(result: PassResult) -> None:
        passes.append(result)
        if conditions.state(result.job.status) == "Running" and ("worker-0", 0) in backend.replicas:
            backend.finish("worker-0", exit_code=2)

    job = make_job("j").master().workers(1).restart_policy("Never").build()
    job = run_until_done(job, backend, backend.clock, on_pass=worker_fails)
    assert conditions.is_true(job.status, ConditionType.FAILED)
    stops = [a for a in backend.executed if isinstance(a, DeleteReplica)]
    assert [str(a.replica) for a in stops] == ["master-0"] and stops[0].final
    # The pass that failed the job still had the master live: not done then.
    failing = next(p for p in passes if conditions.is_true(p.job.status, ConditionType.FAILED))
    assert not failing.done and passes[-1].done


def test_the_loop_sleeps_until_the_deadline_the_planner_asked_for() -> None:
    clock = FakeClock()
    backend = FakeBackend(clock=clock)
    start = clock.now()
    job = make_job("j").master().workers(1).run_policy(activeDeadlineSeconds=60).build()
    job = run_until_done(job, backend, clock)
    failure = conditions.find(job.status, ConditionType.FAILED)
    assert failure is not None and "deadline (60s)" in failure.message
    # Woken exactly at the deadline, not at the next idle timeout.
    assert start + timedelta(seconds=60) in backend.waits
    assert failure.last_transition_time == timestamp(start + timedelta(seconds=60))


def test_the_rendezvous_store_starts_before_the_replicas_and_goes_when_the_job_ends() -> None:
    backend = FakeBackend()

    def workers_finish(result: PassResult) -> None:
        if backend.live == ["worker-0@0", "worker-1@0"] and conditions.state(result.job.status) == "Running":
            backend.finish("worker-0")
            backend.finish("worker-1")

    job = make_job("el").workers(2).elastic(minReplicas=1, maxReplicas=2).build()
    run_until_done(job, backend, backend.clock, on_pass=workers_finish)
    kinds = [type(a) for a in backend.executed]
    assert kinds[0] is CreateRendezvousStore and kinds.count(CreateRendezvousStore) == 1
    assert kinds.index(CreateRendezvousStore) < kinds.index(CreateReplica)
    assert DeleteRendezvousStore in kinds and not backend.store_running
