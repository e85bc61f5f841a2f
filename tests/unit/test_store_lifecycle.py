"""The planner decides the rendezvous store's life, when a replica's Service goes, and what to do about stuck Pods
and lost stop orders; backends only observe and obey."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.unit.test_planning import T0, at, step
from torchjob.api.types import ReplicaType
from torchjob.controller.loop import reconcile_once
from torchjob.core.actions import (
    CreateRendezvousStore,
    CreateReplica,
    DeleteRendezvousStore,
    DeleteReplica,
    DeleteStuckPod,
)
from torchjob.core.observed import Observed, Platform, StuckPod, UnorderedStop
from torchjob.core.planning import plan
from torchjob.core.replicas import ReplicaId
from torchjob.testing import FakeBackend, failed, make_job, running, succeeded

ELASTIC = make_job("el").workers(2).elastic(minReplicas=1, maxReplicas=2).build()


def kinds(actions: Sequence[object]) -> list[str]:
    return [type(a).__name__ for a in actions]


def test_the_store_starts_before_the_first_replicas_that_meet_at_it() -> None:
    result = plan(ELASTIC, Observed([]), Platform(), T0)
    assert kinds(result.actions) == ["CreateRendezvousStore", "CreateReplica", "CreateReplica"]
    assert not any(
        isinstance(a, CreateRendezvousStore)
        for a in plan(ELASTIC, Observed([], store_running=True), Platform(), T0).actions
    )


def test_a_lost_store_is_started_again_while_the_group_runs() -> None:
    job, _ = step(ELASTIC, [])
    result = plan(job, Observed([running("worker-0"), running("worker-1")], store_running=False), Platform(), at(5))
    assert result.actions == [CreateRendezvousStore()]


@pytest.mark.parametrize("store_running", [True, False])
def test_the_store_goes_when_the_job_ends_whatever_the_clean_pod_policy(store_running: bool) -> None:
    job, _ = step(ELASTIC, [])
    done = [succeeded("worker-0"), succeeded("worker-1")]
    result = plan(job, Observed(done, store_running=store_running), Platform(), at(9))
    assert (DeleteRendezvousStore() in result.actions) == store_running
    assert not any(isinstance(a, DeleteReplica) for a in result.actions)  # cleanPodPolicy None keeps the rest


@pytest.mark.parametrize(("reaches", "hosted"), [(True, False), (False, True)])
def test_a_named_rdzv_host_is_used_where_the_platform_reaches_it(reaches: bool, hosted: bool) -> None:
    job = make_job("el").workers(2).elastic(minReplicas=1, maxReplicas=2, rdzvHost="rdzv.example").build()
    result = plan(job, Observed([]), Platform(reaches_rdzv_host=reaches), T0)
    assert isinstance(result.actions[0], CreateRendezvousStore) == hosted


def test_fixed_groups_have_no_store() -> None:
    job = make_job("j").master().workers(1).build()
    assert kinds(plan(job, Observed([]), Platform(), T0).actions) == ["CreateReplica", "CreateReplica"]


def test_only_the_deletes_of_a_finished_job_are_final() -> None:
    """A final delete takes the replica's Service too; a group restart keeps Services for the next attempt."""
    job = make_job("j").master().workers(1).build()
    job, _ = step(job, [])
    _, restart = step(job, [running("master-0"), failed("worker-0", exit_code=1, at=at(1))], at(2))
    stops = [a for a in restart.actions if isinstance(a, DeleteReplica)]
    assert stops and not any(a.final for a in stops)
    never = make_job("j").master().workers(1).restart_policy("Never").build()
    never, _ = step(never, [])
    _, failure = step(never, [running("master-0"), failed("worker-0", exit_code=1, at=at(1))], at(2))
    stops = [a for a in failure.actions if isinstance(a, DeleteReplica)]
    assert [str(a.replica) for a in stops] == ["master-0"] and all(a.final for a in stops)
    assert not any(isinstance(a, CreateReplica) for a in failure.actions)


def test_a_stuck_store_is_removed_by_force_before_it_is_made_again_under_its_name() -> None:
    job, _ = step(ELASTIC, [])
    lost = StuckPod("el-rdzv", "the rendezvous store's node stopped reporting", left_out=True)
    observed = Observed([running("worker-0"), running("worker-1")], store_running=False, stuck=[lost])
    result = plan(job, observed, Platform(), at(5))
    assert result.actions == [DeleteStuckPod("el-rdzv", lost.why), CreateRendezvousStore()]


def test_stuck_pods_and_lost_stop_orders_are_the_planners_to_act_on_and_only_while_observed() -> None:
    backend = FakeBackend()
    job = make_job("j").master().workers(1).build()
    backend.stuck = [StuckPod("j-worker-1", "its deletion was decided and its node stopped reporting", False)]
    backend.unordered_stops = [UnorderedStop(ReplicaId(ReplicaType.WORKER, 0), 1)]
    reconcile_once(job, backend, backend.clock)
    assert backend.stuck_removed == ["j-worker-1"] and backend.stops_reordered == [("worker-0", 1)]
    assert kinds(backend.executed[:2]) == ["DeleteStuckPod", "ReorderStop"]  # before anything else
    reconcile_once(job, backend, backend.clock)  # gone from the observation: nothing is done again
    assert backend.stuck_removed == ["j-worker-1"] and backend.stops_reordered == [("worker-0", 1)]
