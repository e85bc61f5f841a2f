"""In-place repair in the planner: a lost member goes to a ready spare only when everything allows it."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from tests.unit.test_planning import T0, at
from torchjob import worker_files
from torchjob.api.errors import ValidationError
from torchjob.api.types import ElasticPolicy, GroupMembership, PyTorchJob, ReplicaType
from torchjob.core.actions import CreateReplica, CreateSpare, DeleteReplica, DeleteSpare, ReformGroup, RepairReplica
from torchjob.core.envs import Addressing, holds_a_place, replica_env
from torchjob.core.observed import Observed, Platform, PlatformReason, ReplicaObservation, SilentNode, SpareObservation
from torchjob.core.planning import plan
from torchjob.core.policies import repair
from torchjob.core.replicas import ReplicaId
from torchjob.core.reported import MemberAnnouncement, Progress
from torchjob.testing import failed, make_job, running

SPARES_PLATFORM = Platform(repairs_in_place=True)  # a cluster with report endpoints, or this machine
READY = SpareObservation("spare-0", 0, ready=True)


def in_place_job(spares: str = "1", backoff: int = 3, **annotations: str) -> PyTorchJob:
    builder = make_job("mend").master().workers(2).annotate(**{"torchjob.io/spares": spares, **annotations})
    return builder.run_policy(backoffLimit=backoff).build()


def started(job: PyTorchJob) -> PyTorchJob:
    result = plan(job, Observed([], store_running=True), SPARES_PLATFORM, T0)
    return job.model_copy(update={"status": result.status})


def group(lost_signal: int | None = signal.SIGKILL, repairable: bool = True) -> list[ReplicaObservation]:
    members = [running("master-0"), running("worker-0"), failed("worker-1", signal=lost_signal, at=at(4))]
    return [replace(o, repairable=repairable) for o in members]


def two_killed() -> list[ReplicaObservation]:
    """The master running, both workers killed at once; all three in the in-place loop."""
    members = [running("master-0"), *(failed(w, signal=signal.SIGKILL, at=at(4)) for w in ("worker-0", "worker-1"))]
    return [replace(o, repairable=True) for o in members]


def told(
    generation: int, members: tuple[str, ...], promoted: dict[str, str] | None = None, lost_in: int | None = None
) -> ReformGroup:
    """The membership of attempt 0 the group is told (``promoted`` spares join it); ``lost_in``: the newest
    generation made because members were lost (by default this one)."""
    joined, spares = sorted((promoted or {}).values()), dict(promoted or {})
    lost = generation if lost_in is None else lost_in
    membership = GroupMembership(
        attempt=0, generation=generation, members=list(members), joined=joined, spares=spares, lost_in=lost
    )
    return ReformGroup(membership)


def test_spares_start_with_the_group_and_the_store_before_both() -> None:
    result = plan(in_place_job(spares="2"), Observed([]), SPARES_PLATFORM, T0)
    kinds = [type(a).__name__ for a in result.actions]
    assert kinds == ["CreateRendezvousStore", *["CreateReplica"] * 3, "CreateSpare", "CreateSpare"]
    # Where the platform cannot repair in place (a cluster, today), the same job keeps no spares.
    assert not any(isinstance(a, CreateSpare) for a in plan(in_place_job(), Observed([]), Platform(), T0).actions)


def test_a_lost_member_goes_to_a_ready_spare_and_nothing_else_stops() -> None:
    job = started(in_place_job())
    result = plan(job, Observed(group(), store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    members = ("master-0", "worker-0", "worker-1")
    assert result.actions == [
        RepairReplica(group()[2].replica, 0, "spare-0"),
        told(1, members, {"spare-0": "worker-1"}),
    ]
    assert (result.status.attempt, result.status.restart_count, result.status.repairs) == (0, 0, 1)
    assert [e.reason for e in result.events] == ["Repaired"]
    assert "worker-1 was killed by SIGKILL; spare-0 takes its place" in result.events[0].message


def test_survivors_that_cannot_be_repaired_around_restart_the_group_at_once() -> None:
    job = started(in_place_job())
    result = plan(job, Observed(group(repairable=False), store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    assert result.status.attempt == 1 and result.status.repairs == 0
    assert any(isinstance(a, DeleteReplica) for a in result.actions)
    assert result.status.attempts[0].outcome == "worker-1 was killed by SIGKILL"


def test_a_member_that_ended_with_its_scripts_error_is_not_waited_for() -> None:
    """Exit code 1 (an exception: a spare would meet it again, or the script asks for the restart, as a sharded
    group that lost every copy of a shard does) restarts the group at once where no spare is ready."""
    job = started(in_place_job())
    errored = plan(job, Observed(group(lost_signal=None), store_running=True, spares=[]), SPARES_PLATFORM, at(5))
    assert errored.status.attempt == 1 and "SpareAwaited" not in [e.reason for e in errored.events]
    # Nor one over its memory limit: a spare would be too.
    oom = [*group()[:2], replace(failed("worker-1", exit_code=137, reason="OOMKilled", at=at(4)), repairable=True)]
    greedy = plan(job, Observed(oom, store_running=True, spares=[]), SPARES_PLATFORM, at(5))
    assert greedy.status.attempt == 1 and "SpareAwaited" not in [e.reason for e in greedy.events]


@pytest.mark.parametrize("spares", [[replace(READY, ready=False)], []], ids=["warming", "none"])
def test_without_a_ready_spare_the_group_waits_for_one_then_restarts(spares: list[SpareObservation]) -> None:
    """The survivors hold the group's state in memory: a spare still warming (or one made now, where the job has
    none) is waited for, up to the job's spare wait (45 s by default) after the loss; said once; then the group
    restarts, saying why."""
    job = started(in_place_job())
    waiting = plan(job, Observed(group(), store_running=True, spares=spares), SPARES_PLATFORM, at(5))
    assert waiting.status.attempt == 0 and not any(isinstance(a, DeleteReplica) for a in waiting.actions)
    assert [a for a in waiting.actions if isinstance(a, CreateSpare)] == ([] if spares else [CreateSpare(0)])
    assert [e.reason for e in waiting.events] == ["SpareAwaited"]
    assert waiting.events[0].message == (
        "worker-1 was killed by SIGKILL; no spare is ready to take its place: the group waits for one, up to 45s"
    )
    assert waiting.requeue_at == at(4 + 45)  # from the loss
    job = job.model_copy(update={"status": waiting.status})

    still = plan(job, Observed(group(), store_running=True, spares=spares), SPARES_PLATFORM, at(20))
    assert still.status.attempt == 0 and not still.events  # said once

    warm = plan(job, Observed(group(), store_running=True, spares=[READY]), SPARES_PLATFORM, at(20))
    assert [e.reason for e in warm.events] == ["Repaired"] and warm.status.repairs == 1
    assert warm.status.attempts[0].spare_awaited_time is None

    late = plan(job, Observed(group(), store_running=True, spares=spares), SPARES_PLATFORM, at(4 + 45))
    assert late.status.attempt == 1 and late.status.repairs == 0
    outcome = late.status.attempts[0].outcome
    assert outcome == "worker-1 was killed by SIGKILL (no spare was ready for its place; waited 44s)", outcome


def test_a_member_lost_with_its_node_is_still_waited_for_while_the_platform_evicts_its_pod() -> None:
    """A silent node's Pods are evicted after their toleration (30 s on some clusters), which can come within the
    wait for a spare: the lost member's place stays empty all the same, and the spare that warms takes it (the
    lost Pod removed by force: no kubelet will confirm its stop)."""

    def lost(evicted: bool) -> list[ReplicaObservation]:
        gone = failed("worker-1", signal=None, reason="NodeLost", at=at(4), stopping=evicted)
        return [replace(o, repairable=True) for o in (running("master-0"), running("worker-0"), gone)]

    job = started(in_place_job())
    waiting = plan(job, Observed(lost(False), store_running=True, spares=[]), SPARES_PLATFORM, at(5))
    assert [e.reason for e in waiting.events] == ["SpareAwaited"]
    job = job.model_copy(update={"status": waiting.status})
    evicted = plan(job, Observed(lost(True), store_running=True, spares=[]), SPARES_PLATFORM, at(35))
    assert evicted.status.attempt == 0 and not evicted.events  # still waiting
    warm = plan(job, Observed(lost(True), store_running=True, spares=[READY]), SPARES_PLATFORM, at(40))
    assert [e.reason for e in warm.events] == ["Repaired"] and warm.status.attempt == 0
    assert RepairReplica(ReplicaId(ReplicaType.WORKER, 1), 0, "spare-0", force=True) in warm.actions


def test_the_spare_wait_is_the_jobs_own_and_zero_restarts_at_once() -> None:
    """A cluster whose spare Pods take minutes to start waits longer (``torchjob.io/spare-wait-seconds``); "0"
    restarts the group at once, as without the wait."""
    patient = started(in_place_job(**{"torchjob.io/spare-wait-seconds": "300"}))
    waiting = plan(patient, Observed(group(), store_running=True, spares=[]), SPARES_PLATFORM, at(5))
    assert waiting.events[0].message.endswith("the group waits for one, up to 300s") and waiting.requeue_at == at(304)
    patient = patient.model_copy(update={"status": waiting.status})
    still = plan(patient, Observed(group(), store_running=True, spares=[]), SPARES_PLATFORM, at(250))
    assert still.status.attempt == 0
    hasty = started(in_place_job(**{"torchjob.io/spare-wait-seconds": "0"}))
    restarted = plan(hasty, Observed(group(), store_running=True, spares=[]), SPARES_PLATFORM, at(5))
    assert restarted.status.attempt == 1 and "SpareAwaited" not in [e.reason for e in restarted.events]
    assert restarted.status.attempts[0].outcome == "worker-1 was killed by SIGKILL"


def test_a_group_waits_for_no_spare_the_job_does_not_keep() -> None:
    """Two lost, one spare kept: the second place could never be filled, so the group restarts at once."""
    job = started(in_place_job(spares="1"))
    two = two_killed()
    result = plan(job, Observed(two, store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    assert result.status.attempt == 1 and "SpareAwaited" not in [e.reason for e in result.events]


def test_repairs_and_restarts_share_the_backoff_limit() -> None:
    job = started(in_place_job(backoff=1))
    job = job.model_copy(update={"status": job.status.model_copy(update={"repairs": 1})})
    result = plan(job, Observed(group(), store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    assert not any(isinstance(a, RepairReplica) for a in result.actions)
    assert result.status.conditions[-1].type.value == "Failed"


def test_two_members_lost_at_once_take_two_spares_or_restart_the_group() -> None:
    job = started(in_place_job(spares="2"))
    two = two_killed()
    one_spare = plan(job, Observed(two, store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    # The job keeps two spares: the group waits for the second to warm (and restarts if it does not in time).
    assert one_spare.status.attempt == 0 and not any(isinstance(a, RepairReplica) for a in one_spare.actions)
    assert [e.reason for e in one_spare.events] == ["SpareAwaited"]

    spares = [READY, SpareObservation("spare-1", 0, ready=True)]
    result = plan(job, Observed(two, store_running=True, spares=spares), SPARES_PLATFORM, at(5))
    # One membership for both: the group re-forms once.
    assert result.actions == [
        RepairReplica(two[1].replica, 0, "spare-0"),
        RepairReplica(two[2].replica, 0, "spare-1"),
        told(1, ("master-0", "worker-0", "worker-1"), {"spare-0": "worker-0", "spare-1": "worker-1"}),
    ]
    assert (result.status.attempt, result.status.restart_count, result.status.repairs) == (0, 0, 2)
    assert [e.reason for e in result.events] == ["Repaired", "Repaired"]
    # Both repairs count against backoffLimit: with room for one retry only, the group restarts... and fails.
    tight = started(in_place_job(spares="2", backoff=1))
    capped = plan(tight, Observed(two, store_running=True, spares=spares), SPARES_PLATFORM, at(5))
    assert not any(isinstance(a, RepairReplica) for a in capped.actions)
    # ...nor does it wait for a spare it could not use.
    waits = plan(tight, Observed(two, store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    assert [e.reason for e in waits.events] == ["Restarting"] and waits.status.attempt == 1


def test_a_membership_keeps_every_promotion_of_the_attempt() -> None:
    members = ["master-0", "worker-0", "worker-1"]
    first = repair.next_membership(None, 0, members, [("spare-0", "worker-1")])
    second = repair.next_membership(first, 0, members, [("spare-1", "worker-0")])
    assert (first.generation, second.generation) == (1, 2)
    assert second.spares == {"spare-0": "worker-1", "spare-1": "worker-0"}
    assert second.members == members and second.joined == ["worker-0"]
    # A membership of an earlier attempt is not carried over: the new attempt's first is generation 1.
    third = repair.next_membership(second, 1, members, [("spare-2", "worker-0")])
    assert (third.generation, third.spares) == (1, {"spare-2": "worker-0"})


def test_a_membership_names_the_newest_generation_made_because_members_were_lost() -> None:
    """Members leave a step that waits far too long only for a loss: a handover or a joining spare is agreed at
    the next step, however slow the one in progress is on a loaded machine."""
    members = ["master-0", "worker-0", "worker-1"]
    handed = repair.next_membership(None, 0, members, [("spare-0", "worker-1")], lost=False)
    repaired = repair.next_membership(handed, 0, members, [("spare-1", "worker-0")])
    grown = repair.next_membership(repaired, 0, members, [("spare-2", "worker-1")], lost=False)
    assert [(m.generation, m.lost_in) for m in (handed, repaired, grown)] == [(1, 0), (2, 2), (3, 2)]
    assert grown.to_json()["lost_in"] == 2
    # A membership an older controller kept says nothing: its own generation may have been a loss.
    older = GroupMembership(attempt=0, generation=4, members=members)
    assert older.to_json()["lost_in"] == 4
    assert repair.next_membership(older, 0, members, [], lost=False).lost_in == 4
    # ... and so does one an older controller publishes: members read it as a loss, as they did.
    wire = {"attempt": 0, "generation": 5, "members": members}
    assert worker_files.parse_membership(wire) == {**wire, "joined": [], "spares": {}, "lost_in": 5}
    assert worker_files.parse_membership({**wire, "lost_in": "2"}) is None


def test_spares_of_an_ended_attempt_go_and_the_new_attempt_gets_its_own() -> None:
    job = started(in_place_job())
    job = job.model_copy(update={"status": job.status.model_copy(update={"attempt": 1})})
    old = SpareObservation("spare-0", 0, ready=True)
    result = plan(job, Observed([], store_running=True, spares=[old]), SPARES_PLATFORM, at(9))
    assert DeleteSpare("spare-0", "its attempt ended") in result.actions
    assert any(isinstance(a, CreateReplica) for a in result.actions)
    assert CreateSpare(1) in result.actions


def test_a_spare_that_ended_on_its_own_goes_and_another_is_started() -> None:
    dead = SpareObservation("mend-spare-0-0", 0, ready=False, failed=True)
    actions, ready = repair.spare_actions(1, [dead], attempt=0, group_up=True)
    assert actions == [DeleteSpare("mend-spare-0-0", "it ended on its own"), CreateSpare(0)] and ready == 0


def test_spares_are_refused_for_groups_that_cannot_be_repaired_in_place() -> None:
    under_torchrun = make_job("np").workers(2).spec(nprocPerNode="2").command("torchrun", "train.py")
    with pytest.raises(ValidationError, match=r"runs directly .* but its command starts torchrun"):
        under_torchrun.annotate(**{"torchjob.io/spares": "1"}).build()
    torchrun = make_job("el").workers(2).elastic(minReplicas=1, maxReplicas=2).command("torchrun", "train.py")
    with pytest.raises(ValidationError, match=r"runs directly .* but its command starts torchrun"):
        torchrun.annotate(**{"torchjob.io/spares": "0"}).build()


def test_a_replica_of_several_processes_is_repaired_in_place_as_a_whole() -> None:
    """``nprocPerNode: 4`` with the script run directly: the replica's four processes are one member (their
    script starts the other three, train/local_ranks.py), and a spare of four takes a lost replica's place."""
    job = make_job("np").workers(2).spec(nprocPerNode="4").annotate(**{"torchjob.io/spares": "1"}).build()
    assert repair.spares_wanted(job) == 1
    assert CreateSpare(0) in plan(job, Observed([]), SPARES_PLATFORM, T0).actions
    env = dict(replica_env(job, ReplicaId(ReplicaType.WORKER, 1), 0, Addressing("m", 1, "m", 2)))
    assert (env["WORLD_SIZE"], env["RANK"], env["TORCHJOB_REPLICA_PROCESSES"]) == ("8", "1", "4")
    assert not holds_a_place("TORCHJOB_REPLICA_PROCESSES")  # a spare keeps it


def beating(name: str, step: int, alive: float) -> ReplicaObservation:
    """A running, repairable replica that completed ``step`` at second 10 and last beat at second ``alive``."""
    return replace(running(name), progress=Progress(at(10), step, alive_at=at(alive)), repairable=True)


def hang_job() -> PyTorchJob:
    builder = make_job("mend").master().workers(2).run_policy(backoffLimit=3)
    return started(
        builder.annotate(**{"torchjob.io/spares": "1", "torchjob.io/progress-deadline-seconds": "30"}).build()
    )


def test_a_hung_group_whose_one_silent_rank_is_known_replaces_it_with_a_spare() -> None:
    job = hang_job()
    # Every step stuck since second 10; worker-1 stopped beating then, the others beat until now (second 45).
    hung = [beating("master-0", 7, 45), beating("worker-0", 7, 44), beating("worker-1", 7, 11)]
    result = plan(job, Observed(hung, store_running=True, spares=[READY]), SPARES_PLATFORM, at(45))
    assert result.actions[0] == RepairReplica(hung[2].replica, 0, "spare-0")
    assert result.actions[1] == told(1, ("master-0", "worker-0", "worker-1"), {"spare-0": "worker-1"})
    assert (result.status.attempt, result.status.restart_count, result.status.repairs) == (0, 0, 1)
    assert [e.reason for e in result.events] == ["Hung", "Repaired"]
    assert "worker-1 stopped responding, the others wait for it" in result.events[0].message
    assert "worker-1 stopped responding (hung); spare-0 takes its place" in result.events[1].message
    assert result.status.attempts[0].repaired_time is not None

    # The repair counts as progress: the repaired group gets a whole deadline before it is judged again.
    repaired = job.model_copy(update={"status": result.status})
    after = [beating("master-0", 7, 70), beating("worker-0", 7, 70), beating("worker-1", 7, 70)]
    again = plan(repaired, Observed(after, store_running=True, spares=[]), SPARES_PLATFORM, at(70))
    assert not any(e.reason == "Hung" for e in again.events)
    later = plan(repaired, Observed(after, store_running=True), SPARES_PLATFORM, at(76))
    assert any(e.reason == "Hung" for e in later.events)  # 30 s after the repair at second 45, still at step 7


def test_a_hung_member_whose_node_is_gone_is_left_to_its_nodes_loss_and_its_place_waits_for_a_spare() -> None:
    """worker-1's node stopped reporting and does not answer, and worker-1 missed three announcements while the
    others wait for it: a hang, 0.45 s in, before its node's loss (1.5 s of silence). With a spare ready it is
    replaced at once; with none (the spare went with the node), the hang is left to the node's loss, and the group
    then waits for a spare as for any member lost, rather than restart now, counted."""
    node = SilentNode("n2", at(9), unreachable=True)

    def group(spoke: float) -> list[ReplicaObservation]:
        def member(name: str, heard: float, waiting: int | None) -> ReplicaObservation:
            said = MemberAnnouncement(attempt=0, heard_at=at(heard), every=0.15, waiting_in=waiting, settled=True)
            return replace(running(name), progress=Progress(at(8), 7, alive_at=at(heard)), repairable=True, member=said)

        gone = replace(member("worker-1", spoke, None), silent_node=node)
        return [member("master-0", spoke + 0.5, 0), member("worker-0", spoke + 0.5, 0), gone]

    job = started(in_place_job())
    quick = plan(job, Observed(group(10), store_running=True, spares=[READY]), SPARES_PLATFORM, at(10.5))
    assert [e.reason for e in quick.events] == ["Hung", "Repaired"]  # a ready spare: at once
    held = plan(job, Observed(group(10), store_running=True, spares=[]), SPARES_PLATFORM, at(10.5))
    assert held.status.attempt == 0 and not held.events and not held.actions
    assert held.requeue_at == at(11.5)  # when its loss is due (node_loss.look_again_at)
    due = plan(job, Observed(group(10), store_running=True, spares=[]), SPARES_PLATFORM, at(11.5))
    assert not due.events and due.status.attempt == 0  # silent for 1.5 s, not yet more: still held
    lost = plan(job, Observed(group(10), store_running=True, spares=[]), SPARES_PLATFORM, at(11.6))
    assert lost.status.attempt == 0 and [e.reason for e in lost.events] == ["SpareAwaited"]
    assert "worker-1 was lost with its node" in lost.events[0].message
    # Where the loss is not declared by a second after it was due (no other member's beat heard for the liveness
    # deadline: silence proves nothing then), the hang stands.
    quiet = [replace(o, progress=replace(o.progress, alive_at=at(1))) if o.progress else o for o in group(11.9)]
    late = plan(job, Observed(quiet, store_running=True, spares=[]), SPARES_PLATFORM, at(12.6))
    assert late.status.attempt == 1 and [e.reason for e in late.events][:1] == ["Hung"]


def test_a_hang_without_one_known_silent_rank_or_a_spare_restarts_the_group() -> None:
    job = hang_job()
    cases = [
        ([beating("master-0", 7, 45), beating("worker-0", 7, 45), beating("worker-1", 7, 45)], [READY]),  # all beat
        ([beating("master-0", 7, 45), beating("worker-0", 7, 11), beating("worker-1", 7, 11)], [READY]),  # two silent
        ([beating("master-0", 7, 45), beating("worker-0", 7, 45), beating("worker-1", 7, 11)], []),  # no spare
        ([running("master-0"), beating("worker-0", 7, 45), beating("worker-1", 7, 11)], [READY]),  # no beats known
    ]
    for observed, spares in cases:
        result = plan(job, Observed(observed, store_running=True, spares=spares), SPARES_PLATFORM, at(45))
        assert not any(isinstance(a, RepairReplica) for a in result.actions), observed
        assert result.status.attempt == 1 and result.status.restart_count == 1


def test_a_repair_that_does_not_complete_in_time_restarts_the_group() -> None:
    job = started(in_place_job())
    repaired = plan(job, Observed(group(), store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    job = job.model_copy(update={"status": repaired.status})

    def reported(name: str, second: float) -> ReplicaObservation:
        return replace(running(name), progress=Progress(at(second), 9), repairable=True)

    # worker-1 (the spare) has completed no step since the repair at second 5; the others have.
    stalled = [reported("master-0", 30), reported("worker-0", 30), reported("worker-1", 4)]
    pending = plan(job, Observed(stalled, store_running=True), SPARES_PLATFORM, at(64))
    assert pending.status.attempt == 0 and pending.requeue_at is not None and pending.requeue_at <= at(65)
    given_up = plan(job, Observed(stalled, store_running=True), SPARES_PLATFORM, at(66))
    assert (given_up.status.attempt, given_up.status.restart_count) == (1, 1)
    assert [e.reason for e in given_up.events] == ["RepairTimeout", "Restarting"]
    assert "the in-place repair did not complete within 60s (worker-1 completed no step since)" in (
        given_up.events[0].message
    )
    # Once every member has completed a step since the repair, it is done: no deadline any more.
    done = [reported("master-0", 30), reported("worker-0", 30), reported("worker-1", 31)]
    assert plan(job, Observed(done, store_running=True), SPARES_PLATFORM, at(200)).status.attempt == 0


def test_the_next_spare_starts_once_the_repaired_group_has_stepped() -> None:
    """A spare's start (a fork, the script's imports: seconds of CPU) would slow the step the repaired group
    retries, so the planner waits for that step; a group that reports no progress gets its spare at once."""
    job = started(in_place_job())
    repaired = plan(job, Observed(group(), store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    job = job.model_copy(update={"status": repaired.status})

    def reported(name: str, second: float | None) -> ReplicaObservation:
        progress = Progress(at(second), 9) if second is not None else None
        return replace(running(name), progress=progress, repairable=True)

    retrying = [reported("master-0", 4), reported("worker-0", 4), reported("worker-1", None)]
    joined = [reported("master-0", 4), reported("worker-0", 6), reported("worker-1", 6)]
    stepped = [reported("master-0", 6), reported("worker-0", 6), reported("worker-1", 6)]
    silent = [reported("master-0", None), reported("worker-0", None), reported("worker-1", None)]
    for observed, spare in ((retrying, False), (joined, False), (stepped, True), (silent, True)):
        result = plan(job, Observed(observed, store_running=True), SPARES_PLATFORM, at(6))
        assert (CreateSpare(0) in result.actions) is spare, observed
        assert result.status.attempt == 0
    held = plan(job, Observed(retrying, store_running=True), SPARES_PLATFORM, at(6))
    assert held.requeue_at is not None and held.requeue_at <= at(5 + repair.SPARE_HELD_AT_MOST)


def test_the_next_spare_waits_for_a_slow_retried_step_as_long_as_two_of_the_groups_steps() -> None:
    """A model whose steps take seconds retries a step far longer than ``SPARE_HELD_AT_MOST``: the next spare
    waits for it up to ``SPARE_HELD_STEPS`` of the group's usual steps (the longest any member reported)."""
    job = started(in_place_job())
    repaired = plan(job, Observed(group(), store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    job = job.model_copy(update={"status": repaired.status})
    usual = 5.0
    retrying = [
        replace(running(name), progress=Progress(at(4), 9, seconds_per_step=step), repairable=True)
        for name, step in (("master-0", usual), ("worker-0", 1.0))
    ] + [replace(running("worker-1"), repairable=True)]
    held_until = 5 + repair.SPARE_HELD_STEPS * usual
    for second, spare in ((5 + repair.SPARE_HELD_AT_MOST, False), (held_until - 0.1, False), (held_until, True)):
        result = plan(job, Observed(retrying, store_running=True), SPARES_PLATFORM, at(second))
        assert (CreateSpare(0) in result.actions) is spare, second
        assert result.status.attempt == 0
    held = plan(job, Observed(retrying, store_running=True), SPARES_PLATFORM, at(5 + repair.SPARE_HELD_AT_MOST))
    assert held.requeue_at is not None and held.requeue_at <= at(held_until)


def test_a_joiner_that_stalls_does_not_keep_its_replacement_from_warming() -> None:
    """The next spare waits for the repaired group's step at most ``SPARE_HELD_AT_MOST``: a promoted spare
    that never steps is named silent seconds later, and a warm spare must be there to take its place."""
    job = started(in_place_job())
    repaired = plan(job, Observed(group(), store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    job = job.model_copy(update={"status": repaired.status})
    stalled = [
        replace(running(name), progress=Progress(at(4), 9) if name != "worker-1" else None, repairable=True)
        for name in ("master-0", "worker-0", "worker-1")
    ]
    result = plan(job, Observed(stalled, store_running=True), SPARES_PLATFORM, at(5 + repair.SPARE_HELD_AT_MOST))
    assert CreateSpare(0) in result.actions
    assert result.status.attempt == 0


def on_notice(reason: PlatformReason = PlatformReason.EVICTED, stopping: bool = True) -> list[ReplicaObservation]:
    """The group with worker-1 still running, on notice of its eviction (its Pod being deleted gracefully)."""
    evicted = replace(running("worker-1"), disrupted_at=at(4), reason=reason, stopping=stopping)
    return [replace(o, repairable=True) for o in (running("master-0"), running("worker-0"), evicted)]


def test_a_member_on_notice_of_eviction_hands_its_place_to_a_ready_spare_while_it_runs() -> None:
    job = started(in_place_job())
    result = plan(job, Observed(on_notice(), store_running=True, spares=[READY]), SPARES_PLATFORM, at(5))
    members = ("master-0", "worker-0", "worker-1")
    worker_1 = on_notice()[2].replica
    assert result.actions == [
        RepairReplica(worker_1, 0, "spare-0", handover=True),
        told(1, members, {"spare-0": "worker-1"}, lost_in=0),  # by agreement: no member leaves its step for it
    ]
    # The platform's doing: counted as a repair (it is one), never against the backoff limit, no restart.
    assert (result.status.attempt, result.status.restart_count, result.status.repairs) == (0, 0, 1)
    assert [(e.type, e.reason) for e in result.events] == [("Normal", "HandedOver")]
    assert "worker-1 is being evicted; spare-0 takes its place" in result.events[0].message
    preempted = plan(
        job,
        Observed(on_notice(PlatformReason.PREEMPTED), store_running=True, spares=[READY]),
        SPARES_PLATFORM,
        at(5),
    )
    assert "worker-1 is being preempted" in preempted.events[0].message


def test_without_a_ready_spare_a_member_on_notice_is_left_to_go_and_be_repaired_then() -> None:
    job = started(in_place_job())
    warming = replace(READY, ready=False)
    for spares in ([], [warming]):
        result = plan(job, Observed(on_notice(), store_running=True, spares=spares), SPARES_PLATFORM, at(5))
        assert not any(isinstance(a, RepairReplica | DeleteReplica) for a in result.actions)
        assert result.status.repairs == 0 and result.status.attempt == 0
    # An elastic group shrinks around a leaving member instead; a group that is not in place has no spares.
    elastic = started(in_place_job()).model_copy(deep=True)
    elastic.spec.elastic_policy = ElasticPolicy(min_replicas=1, max_replicas=3)
    assert repair.decide_handover(elastic, 0, on_notice(), [READY]) == []
