"""A replica on a node that stopped reporting is lost only with a second witness of its own."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from torchjob.api.types import TrainerMetric, TrainerStatus
from torchjob.core.actions import CreateReplica, DeleteReplica
from torchjob.core.observed import (
    Observed,
    Phase,
    Platform,
    PlatformReason,
    ReplicaObservation,
    SilentNode,
    SpareObservation,
)
from torchjob.core.planning import plan
from torchjob.core.policies import repair
from torchjob.core.policies.node_loss import declare_lost, look_again_at
from torchjob.core.reported import Progress
from torchjob.testing import make_job, running

T0 = datetime(2026, 11, 25, 12, 0, 0, tzinfo=timezone.utc)
JOB = make_job("j").master().workers(2).build()  # the liveness deadline is 10 s by default


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def on_silent_node(name: str, beat: float | None, disrupted: bool = False) -> ReplicaObservation:
    """A running replica whose node was last heard at T0+5, which last beat at T0+``beat`` (None: never)."""
    progress = None if beat is None else Progress(at(beat - 1), 12, alive_at=at(beat))
    return replace(
        running(name),
        progress=progress,
        silent_node=SilentNode("node-b", at(5)),
        disrupted_at=at(40) if disrupted else None,
    )


def peer(now: float) -> ReplicaObservation:
    """master-0, on a node that reports, beating a second before ``now``."""
    return replace(running("master-0"), progress=Progress(at(now - 1), 12, alive_at=at(now - 1)))


def test_a_replica_that_still_beats_on_a_silent_node_is_not_lost() -> None:
    # Only the kubelet stopped (an upgrade, a kubelet cut from the API server): the training goes on.
    seen = on_silent_node("worker-1", beat=29)
    assert declare_lost(JOB, [seen], at(30), reports_heard=True) == [seen]
    assert look_again_at(JOB, [seen]) == at(39)  # when its silence would pass the liveness deadline


def test_a_replica_silent_with_its_node_is_lost_from_the_earlier_of_the_two() -> None:
    _, lost = declare_lost(JOB, [peer(20), on_silent_node("worker-1", beat=6)], at(20), reports_heard=True)
    assert (lost.phase, lost.reason, lost.finished_at) == (Phase.FAILED, PlatformReason.NODE_LOST, at(5))
    assert lost.describe() == (
        "worker-1 was lost with its node: node node-b stopped reporting at 2026-11-25T12:00:05Z, "
        "and worker-1 has not beaten since 2026-11-25T12:00:06Z"
    )


def test_a_node_the_operator_cannot_reach_needs_only_a_missed_beat_and_a_half() -> None:
    # A vanished host: its kubelet's lease is not even overdue yet, but the operator's connection goes unanswered.
    unreachable = replace(on_silent_node("worker-1", beat=10), silent_node=SilentNode("node-b", at(8), True))
    assert declare_lost(JOB, [peer(11.4), unreachable], at(11.4), reports_heard=True)[1] == unreachable  # not yet
    assert look_again_at(JOB, [unreachable]) == at(11.5)
    _, lost = declare_lost(JOB, [peer(11.6), unreachable], at(11.6), reports_heard=True)
    assert lost.reason is PlatformReason.NODE_LOST
    assert "(the operator cannot reach the node either)" in lost.describe()
    # A node that only missed a lease renewal (its host answers) still needs the liveness deadline's silence.
    answering = on_silent_node("worker-1", beat=10)
    assert declare_lost(JOB, [peer(12.5), answering], at(12.5), reports_heard=True)[1] == answering


def test_a_script_that_reports_nothing_is_lost_once_the_platform_evicts_it() -> None:
    quiet = on_silent_node("worker-1", beat=None)
    assert declare_lost(JOB, [quiet], at(60), reports_heard=True) == [quiet]  # no witness of its own
    [lost] = declare_lost(JOB, [on_silent_node("worker-1", beat=None, disrupted=True)], at(60), reports_heard=True)
    assert lost.reason is PlatformReason.NODE_LOST
    assert lost.message is not None and lost.message.endswith("and the platform is evicting its Pod")


def test_silence_proves_nothing_where_reports_cannot_be_heard() -> None:
    seen = on_silent_node("worker-1", beat=6)
    assert declare_lost(JOB, [seen], at(60), reports_heard=False) == [seen]


def test_a_node_that_never_stopped_reporting_loses_nobody() -> None:
    seen = replace(running("worker-1"), progress=Progress(at(1), 3, alive_at=at(1)))
    assert declare_lost(JOB, [seen], at(60), reports_heard=True) == [seen]
    assert look_again_at(JOB, [seen]) is None


def test_the_planner_restarts_the_group_and_removes_every_pod_by_force() -> None:
    # The lost Pod has no kubelet to confirm its stop; the survivors wait in a collective that will not end, and
    # a graceful stop would only keep their names (the next attempt's) taken until their kubelets confirm it.
    job = JOB.model_copy(update={"status": plan(JOB, Observed([]), Platform(), T0).status})
    beating = [replace(running(n), progress=Progress(at(19), 12, alive_at=at(19))) for n in ("master-0", "worker-0")]
    job = job.model_copy(
        update={"status": plan(job, Observed([*beating, running("worker-1")]), Platform(), at(1)).status}
    )
    result = plan(
        job, Observed([*beating, on_silent_node("worker-1", beat=6)]), Platform(reports_progress=True), at(20)
    )
    assert result.status.attempts[0].outcome.startswith("worker-1 was lost with its node: node node-b")
    assert (result.status.attempt, result.status.restart_count) == (1, 0)
    stops = {str(a.replica): (a.at_once, a.force) for a in result.actions if isinstance(a, DeleteReplica)}
    assert stops == {"master-0": (True, True), "worker-0": (True, True), "worker-1": (True, True)}
    assert not any(isinstance(a, CreateReplica) for a in result.actions)


def test_a_new_leader_counts_silence_from_when_it_began_to_listen_where_the_job_reports() -> None:
    # The lost node took the old leader with it: the new one never heard worker-1, only its peers.
    unheard = replace(on_silent_node("worker-1", beat=None), unheard_since=at(8))
    reporting = make_job("j").master().workers(2).build()
    reporting.status.trainer_status = TrainerStatus(metrics=[TrainerMetric(name="step", value="12")])
    assert declare_lost(reporting, [peer(15), unheard], at(15), reports_heard=True)[1] == unheard  # 7 s: not yet
    _, lost = declare_lost(reporting, [peer(19), unheard], at(19), reports_heard=True)
    assert lost.reason is PlatformReason.NODE_LOST
    # A job whose scripts never reported: not hearing them proves nothing.
    assert declare_lost(JOB, [unheard], at(60), reports_heard=True) == [unheard]


def test_a_new_leader_repairs_in_place_around_a_replica_it_never_heard() -> None:
    job = make_job("j").master().workers(1).annotate(**{"torchjob.io/spares": "1"}).build()
    lost = replace(
        on_silent_node("worker-0", beat=None),
        phase=Phase.FAILED,
        reason=PlatformReason.NODE_LOST,
        unheard_since=at(8),
    )
    survivor = replace(running("master-0"), repairable=True)
    spare = SpareObservation("j-spare-0-0", 0, ready=True)
    [made] = repair.decide(job, 0, [survivor, lost], [spare])
    assert (str(made.lost.replica), made.spare) == ("worker-0", "j-spare-0-0")
    # Heard, and never announced: it does not run the in-place loop, so the group restarts.
    assert repair.decide(job, 0, [survivor, replace(lost, unheard_since=None)], [spare]) == []


def test_a_replica_that_said_it_was_exiting_is_not_lost_when_it_falls_silent() -> None:
    # Only the kubelet stopped, and the script finished meanwhile: its last report said so.
    seen = on_silent_node("worker-1", beat=6)
    assert seen.progress is not None
    finished = replace(seen, progress=replace(seen.progress, exiting=True))
    assert declare_lost(JOB, [finished], at(60), reports_heard=True) == [finished]
    assert Progress.from_report({"step": 3, "exiting": True}, T0) == Progress(T0, 3, exiting=True)


def test_when_every_process_fell_silent_at_once_silence_proves_nothing() -> None:
    # Only the kubelet stopped, and the job finished meanwhile: every process went quiet together.
    quiet_peer = replace(running("master-0"), progress=Progress(at(5), 12, alive_at=at(6)))
    seen = on_silent_node("worker-1", beat=6)
    assert declare_lost(JOB, [quiet_peer, seen], at(30), reports_heard=True) == [quiet_peer, seen]
