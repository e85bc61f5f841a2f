"""An elastic group under in-place repair shrinks when a member is lost and grows when a spare is ready,
without restarting anyone; a loss it cannot absorb still restarts the group."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tests.unit.test_planning import T0, at
from tests.unit.test_repair_policy import beating, told
from torchjob.api.types import PyTorchJob
from torchjob.core.actions import CreateReplica, CreateSpare, DeleteReplica, Plan, ReformGroup, RepairReplica
from torchjob.core.observed import Observed, Platform, PlatformReason, ReplicaObservation, SpareObservation
from torchjob.core.planning import plan
from torchjob.core.policies import regroup
from torchjob.testing import failed, make_job, running, succeeded

WARMING = SpareObservation("spare-0", 0, ready=False)
SPARES_PLATFORM = Platform(repairs_in_place=True)  # a cluster with report endpoints, or this machine
READY = replace(WARMING, ready=True)


def elastic_job(workers: int = 3, minimum: int = 2, spares: str = "0") -> PyTorchJob:
    builder = make_job("flex").workers(workers).elastic(minReplicas=minimum, maxReplicas=3)
    job = builder.annotate(**{"torchjob.io/spares": spares}).build()
    started = plan(job, Observed([], store_running=True), SPARES_PLATFORM, T0)
    return job.model_copy(update={"status": started.status})


def members(*names: str, repairable: bool = True) -> list[ReplicaObservation]:
    return [replace(running(n), repairable=repairable) for n in names]


def lost(name: str, repairable: bool = True) -> ReplicaObservation:
    return replace(failed(name, at=at(4)), repairable=repairable)


def served(job: PyTorchJob) -> tuple[int, int] | None:
    """What the backend serves after publishing the membership the job's status keeps."""
    kept = job.status.membership
    return None if kept is None else (kept.attempt, kept.generation)


def step(job: PyTorchJob, observed: list[ReplicaObservation], spares: Sequence[SpareObservation] = ()) -> Plan:
    return plan(
        job,
        Observed(observed, store_running=True, spares=list(spares), published_membership=served(job)),
        SPARES_PLATFORM,
        at(5),
    )


def test_an_elastic_group_under_in_place_repair_starts_as_a_group_of_its_target_size() -> None:
    job = elastic_job()
    result = plan(job, Observed([]), SPARES_PLATFORM, T0)
    assert [type(a).__name__ for a in result.actions] == ["CreateRendezvousStore", *["CreateReplica"] * 3]
    assert regroup.applies(job, True) and not regroup.applies(job, False)


def test_a_lost_member_leaves_at_once_and_a_spare_is_started_for_its_place() -> None:
    job = elastic_job()
    result = step(job, [*members("worker-0", "worker-2"), lost("worker-1")])
    assert result.actions == [
        DeleteReplica(lost("worker-1").replica, 0, "a lost member of the elastic group"),
        told(1, ("worker-0", "worker-2")),
        CreateSpare(0, rendezvous_at_store=True),
    ]
    assert (result.status.attempt, result.status.restart_count, result.status.membership_changes) == (0, 0, 1)
    assert [e.reason for e in result.events] == ["MemberLost"]
    assert "carries on in place with 2 Worker(s)" in result.events[0].message

    # While the spare warms, the smaller group runs on, and its empty place is not filled by a cold replica.
    smaller = job.model_copy(update={"status": result.status})
    waiting = step(smaller, members("worker-0", "worker-2"), [WARMING])
    assert not any(isinstance(a, (CreateReplica, CreateSpare, ReformGroup)) for a in waiting.actions)

    # Once it is ready, it takes the empty place, and the group grows back.
    grown = step(smaller, members("worker-0", "worker-2"), [READY])
    # Growing is agreed at the next step: the newest loss stays generation 1's.
    grown_to = told(2, ("worker-0", "worker-1", "worker-2"), {"spare-0": "worker-1"}, lost_in=1)
    assert grown.actions == [RepairReplica(lost("worker-1").replica, 0, "spare-0"), grown_to]
    assert grown.status.membership == grown_to.membership
    assert grown.status.membership_changes == 2 and grown.status.restart_count == 0
    assert [e.reason for e in grown.events] == ["MemberAdded"]


def test_a_ready_spare_takes_the_lost_members_place_in_the_same_pass() -> None:
    result = step(elastic_job(spares="1"), [*members("worker-0", "worker-2"), lost("worker-1")], [READY])
    assert result.actions[:3] == [
        DeleteReplica(lost("worker-1").replica, 0, "a lost member of the elastic group"),
        RepairReplica(lost("worker-1").replica, 0, "spare-0"),
        told(1, ("worker-0", "worker-1", "worker-2"), {"spare-0": "worker-1"}),
    ]


def test_losses_it_cannot_absorb_restart_the_group() -> None:
    cases = [
        (elastic_job(workers=2, minimum=2), [*members("worker-0"), lost("worker-1")]),  # below minReplicas
        (elastic_job(), [*members("worker-0", "worker-2", repairable=False), lost("worker-1")]),  # still starting
        (elastic_job(), [*members("worker-0", "worker-2"), lost("worker-1", repairable=False)]),
    ]
    for job, observed in cases:
        result = step(job, observed)
        assert result.status.attempt == 1 and result.status.restart_count == 1, observed
        assert not any(isinstance(a, ReformGroup) for a in result.actions)


def test_a_new_leader_shrinks_the_group_around_a_member_it_never_heard() -> None:
    # The lost node took the old leader with it: the new one hears the staying members, never the lost one.
    never_heard = replace(lost("worker-1", repairable=False), unheard_since=at(3))
    result = step(elastic_job(), [*members("worker-0", "worker-2"), never_heard])
    assert (result.status.attempt, result.status.restart_count) == (0, 0)
    assert told(1, ("worker-0", "worker-2")) in result.actions
    # Unless the staying members have not announced the loop either: the group is still starting.
    starting = step(elastic_job(), [*members("worker-0", "worker-2", repairable=False), never_heard])
    assert starting.status.attempt == 1 and not any(isinstance(a, ReformGroup) for a in starting.actions)


def test_scaling_changes_the_membership_without_a_restart() -> None:
    job = elastic_job()
    down = job.model_copy(update={"spec": job.spec.model_copy(deep=True)})
    down.spec.pytorch_replica_specs[next(iter(down.spec.pytorch_replica_specs))].replicas = 2
    shrunk = step(down, members("worker-0", "worker-1", "worker-2"))
    assert shrunk.actions == [
        DeleteReplica(running("worker-2").replica, 0, "scaled down to 2 Worker(s)"),
        told(1, ("worker-0", "worker-1"), lost_in=0),  # by agreement: no member leaves its step for it
    ]
    assert [e.reason for e in shrunk.events] == ["ScaledDown"] and shrunk.status.restart_count == 0

    # Scaled up again: a spare is started for the new place, and joins when ready.
    up = step(job, members("worker-0", "worker-1"))
    assert up.actions == [CreateSpare(0, rendezvous_at_store=True)]
    joined = step(job, members("worker-0", "worker-1"), [READY])
    assert joined.actions[-1] == told(1, ("worker-0", "worker-1", "worker-2"), {"spare-0": "worker-2"}, lost_in=0)


def test_a_hung_member_is_stopped_at_once_and_the_others_carry_on_smaller() -> None:
    builder = make_job("flex").workers(3).elastic(minReplicas=2, maxReplicas=3)
    job = builder.annotate(**{"torchjob.io/spares": "0", "torchjob.io/progress-deadline-seconds": "30"}).build()
    job = job.model_copy(update={"status": plan(job, Observed([], store_running=True), SPARES_PLATFORM, T0).status})
    # Every step stuck since second 10; worker-1 stopped beating then, the others beat until now (second 45).
    hung = [beating("worker-0", 7, 45), beating("worker-1", 7, 11), beating("worker-2", 7, 44)]
    result = plan(job, Observed(hung, store_running=True), SPARES_PLATFORM, at(45))
    assert result.actions == [
        DeleteReplica(hung[1].replica, 0, "a hung member of the elastic group", at_once=True),
        told(1, ("worker-0", "worker-2")),
    ]
    assert (result.status.attempt, result.status.restart_count, result.status.membership_changes) == (0, 0, 1)
    assert [e.reason for e in result.events] == ["Hung", "MemberLost"]
    assert "worker-1 stopped responding (hung); the group carries on in place with 2 Worker(s)" in (
        result.events[1].message
    )
    # The next pass starts a spare for the empty place.
    smaller = job.model_copy(update={"status": result.status})
    going = replace(hung[1], stopping=True)
    after = plan(
        smaller,
        Observed([hung[0], going, hung[2]], store_running=True, published_membership=served(smaller)),
        SPARES_PLATFORM,
        at(46),
    )
    assert after.actions == [CreateSpare(0, rendezvous_at_store=True)]


def test_a_member_that_finished_training_leaves_no_place_to_fill() -> None:
    ending = [*members("worker-1", "worker-2"), succeeded("worker-0")]
    result = step(elastic_job(spares="1"), ending, [READY])
    assert not any(isinstance(a, (RepairReplica, ReformGroup, CreateSpare)) for a in result.actions)


def test_a_membership_the_backend_no_longer_serves_is_published_again_from_the_status() -> None:
    """An operator that restarted (or a new leader) serves no membership: the planner asks for the kept one
    again, so the group can still read it; a backend that serves it is not asked twice."""
    job = elastic_job()
    lost_one = step(job, [*members("worker-0", "worker-2"), lost("worker-1")])
    smaller = job.model_copy(update={"status": lost_one.status})
    kept = smaller.status.membership
    assert kept is not None
    restarted = plan(smaller, Observed(members("worker-0", "worker-2"), store_running=True), SPARES_PLATFORM, at(6))
    assert restarted.actions[0] == ReformGroup(kept)
    stale = plan(
        smaller,
        Observed(members("worker-0", "worker-2"), store_running=True, published_membership=(0, kept.generation - 1)),
        SPARES_PLATFORM,
        at(6),
    )
    assert stale.actions[0] == ReformGroup(kept)
    served_already = step(smaller, members("worker-0", "worker-2"))
    assert not any(isinstance(a, ReformGroup) for a in served_already.actions)


def evicted(name: str) -> ReplicaObservation:
    """A running Worker whose Pod is being deleted on a disruption (the Eviction API, a drain)."""
    return replace(running(name), repairable=True, stopping=True, disrupted_at=at(4), reason=PlatformReason.EVICTED)


def test_an_evicted_member_leaves_at_its_next_step_once_and_its_place_is_filled_later() -> None:
    job = elastic_job()
    result = step(job, [*members("worker-0", "worker-2"), evicted("worker-1")])
    # The platform deletes its Pod: nothing to delete, only the smaller membership to publish.
    assert result.actions == [told(1, ("worker-0", "worker-2"), lost_in=0), CreateSpare(0, rendezvous_at_store=True)]
    assert [e.reason for e in result.events] == ["MemberLeaving"]
    assert (result.status.attempt, result.status.restart_count, result.status.membership_changes) == (0, 0, 1)
    # While it finishes its step and goes, the next passes publish nothing again.
    smaller = job.model_copy(update={"status": result.status})
    again = step(smaller, [*members("worker-0", "worker-2"), evicted("worker-1")], [WARMING])
    assert not any(isinstance(a, ReformGroup | DeleteReplica) for a in again.actions)
    assert again.status.membership_changes == 1


def test_an_evicted_member_stays_while_its_leaving_would_take_the_group_below_its_minimum() -> None:
    job = elastic_job(minimum=3)
    result = step(job, [*members("worker-0", "worker-2"), evicted("worker-1")])
    assert not any(isinstance(a, ReformGroup | DeleteReplica) for a in result.actions)
    assert result.status.membership_changes == 0 and result.status.attempt == 0
