"""The planner decides the rendezvous store's life and when a replica's Service goes; backends only obey."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.unit.test_planning import T0, at, step
from torchjob.core.actions import CreateRendezvousStore, CreateReplica, DeleteRendezvousStore, DeleteReplica
from torchjob.core.planning import plan
from torchjob.testing import failed, make_job, running, succeeded

ELASTIC = make_job("el").workers(2).elastic(minReplicas=1, maxReplicas=2).build()


def kinds(actions: Sequence[object]) -> list[str]:
    return [type(a).__name__ for a in actions]


def test_the_store_starts_before_the_first_replicas_that_meet_at_it() -> None:
    result = plan(ELASTIC, [], T0)
    assert kinds(result.actions) == ["CreateRendezvousStore", "CreateReplica", "CreateReplica"]
    assert not any(isinstance(a, CreateRendezvousStore) for a in plan(ELASTIC, [], T0, store_running=True).actions)


def test_a_lost_store_is_started_again_while_the_group_runs() -> None:
    job, _ = step(ELASTIC, [])
    result = plan(job, [running("worker-0"), running("worker-1")], at(5), store_running=False)
    assert result.actions == [CreateRendezvousStore()]


@pytest.mark.parametrize("store_running", [True, False])
def test_the_store_goes_when_the_job_ends_whatever_the_clean_pod_policy(store_running: bool) -> None:
    job, _ = step(ELASTIC, [])
    done = [succeeded("worker-0"), succeeded("worker-1")]
    result = plan(job, done, at(9), store_running=store_running)
    assert (DeleteRendezvousStore() in result.actions) == store_running
    assert not any(isinstance(a, DeleteReplica) for a in result.actions)  # cleanPodPolicy None keeps the rest


@pytest.mark.parametrize(("reaches", "hosted"), [(True, False), (False, True)])
def test_a_named_rdzv_host_is_used_where_the_platform_reaches_it(reaches: bool, hosted: bool) -> None:
    job = make_job("el").workers(2).elastic(minReplicas=1, maxReplicas=2, rdzvHost="rdzv.example").build()
    result = plan(job, [], T0, reaches_rdzv_host=reaches)
    assert isinstance(result.actions[0], CreateRendezvousStore) == hosted


def test_fixed_groups_have_no_store() -> None:
    job = make_job("j").master().workers(1).build()
    assert kinds(plan(job, [], T0).actions) == ["CreateReplica", "CreateReplica"]


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
