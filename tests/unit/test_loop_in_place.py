"""In-place repair and elastic re-forming driven through the reconcile loop on the fake platform: the planner's
actions, carried out (spares, repairs, memberships), come back in the next observation, as on a real backend."""

from __future__ import annotations

from torchjob.api.types import PyTorchJob
from torchjob.controller.loop import reconcile_once
from torchjob.core import conditions
from torchjob.core.actions import CreateSpare, DeleteReplica, ReformGroup, RepairReplica
from torchjob.testing import FakeBackend, make_job


def passes(job: PyTorchJob, backend: FakeBackend, count: int = 3) -> PyTorchJob:
    for _ in range(count):
        job = reconcile_once(job, backend, backend.clock).job
        backend.clock.advance(1)
    return job


def test_a_lost_worker_is_repaired_in_place_through_the_loop_and_the_group_is_told() -> None:
    job = make_job("mend").master().workers(2).annotate(**{"torchjob.io/spares": "1"}).build()
    backend = FakeBackend(repairs_in_place=True)
    job = passes(job, backend)
    assert conditions.state(job.status) == "Running"
    assert backend.live == ["master-0@0", "worker-0@0", "worker-1@0"] and list(backend.spares) == ["spare-0"]

    backend.finish("worker-1", exit_code=1, message="RuntimeError: the link went down")
    job = passes(job, backend, 1)
    repairs = [a for a in backend.executed if isinstance(a, RepairReplica)]
    assert [(str(a.replica), a.spare) for a in repairs] == [("worker-1", "spare-0")]
    assert (job.status.attempt, job.status.restart_count, job.status.repairs) == (0, 0, 1)
    kept = job.status.membership
    assert kept is not None and kept.spares == {"spare-0": "worker-1"} and kept.generation == 1
    assert backend.membership == kept  # what the group reads is what the status keeps
    assert backend.live == ["master-0@0", "worker-0@0", "worker-1@0"]  # the spare is worker-1 now

    # The next spare is started for the next loss, and nothing restarts.
    job = passes(job, backend)
    assert list(backend.spares) == ["spare-1"] and job.status.attempt == 0

    # An operator that restarted serves no membership: the loop publishes the kept one again, once.
    backend.forget()
    before = len(backend.executed)
    job = passes(job, backend)
    assert [a for a in backend.executed[before:] if isinstance(a, ReformGroup)] == [ReformGroup(kept)]
    assert backend.membership == kept


def test_an_elastic_group_shrinks_at_once_and_grows_back_when_its_spare_is_warm() -> None:
    builder = make_job("flex").workers(3).elastic(minReplicas=2, maxReplicas=3)
    job = builder.annotate(**{"torchjob.io/spares": "0"}).build()
    backend = FakeBackend(repairs_in_place=True, warm_spares=False)
    job = passes(job, backend)
    assert backend.live == ["worker-0@0", "worker-1@0", "worker-2@0"] and not backend.spares

    backend.finish("worker-1", exit_code=1)
    job = passes(job, backend, 1)
    assert any(isinstance(a, DeleteReplica) and str(a.replica) == "worker-1" for a in backend.executed)
    smaller = job.status.membership
    assert smaller is not None and smaller.members == ["worker-0", "worker-2"]
    assert any(isinstance(a, CreateSpare) for a in backend.executed) and backend.membership == smaller

    job = passes(job, backend)  # the spare is still warming: the smaller group carries on
    assert job.status.membership == smaller and job.status.attempt == 0

    backend.warm()
    job = passes(job, backend)
    grown = job.status.membership
    assert grown is not None and grown.members == ["worker-0", "worker-1", "worker-2"]
    assert grown.spares == {"spare-0": "worker-1"} and backend.membership == grown
    assert (job.status.attempt, job.status.restart_count) == (0, 0) and job.status.membership_changes == 2
    assert backend.live == ["worker-0@0", "worker-1@0", "worker-2@0"]
