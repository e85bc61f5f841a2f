"""In-place repair: when a lost member of a running group is replaced by a warm spare instead of a restart.

A DDP group normally cannot survive a lost member, so the planner restarts the whole group. A script that
trains under ``torchjob.train.in_place`` can: its survivors drop the broken process group, wait for the next
membership, and re-form with the spare that takes the lost member's place, state included. The planner
repairs in place only when all of this holds, and otherwise keeps the group restart:

- the job asks for spares (``torchjob.io/spares``) and runs one process per replica (an elastic job repairs
  in place by shrinking and growing its group instead: ``policies/regroup.py``);
- replicas of the attempt failed, retryably (one or several at once), or the group hung and exactly one
  replica stopped beating (it is stopped, then replaced); every other replica runs and said it can be
  repaired around (its processes announced the in-place loop);
- a ready spare (warm and waiting) of this attempt for each lost replica;
- counted failures stay within backoffLimit, repairs and restarts together (a crash loop still ends).

Where a lost replica could be repaired around but no spare is ready yet (the spare went with the same node, or a
second loss came before the next spare warmed), the group waits for one (``spare_awaited_until``), up to the
job's spare wait after the loss (``torchjob.io/spare-wait-seconds``, 45 s by default): the survivors hold the
group's state in memory, and a restart would read it back from the last checkpoint, losing the steps since, or
start over.

A repair that does not complete, i.e. some member has not finished a step since it within
``REPAIR_DEADLINE`` (or three of its steps, if they are longer), is given up: the group restarts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from torchjob.api import extensions
from torchjob.api.types import GroupMembership, PyTorchJob
from torchjob.core.actions import Action, Cause, CreateSpare, DeleteSpare
from torchjob.core.envs import in_place, spare_wait
from torchjob.core.observed import Phase, PlatformReason, ReplicaObservation, SpareObservation, lost_with_node
from torchjob.core.policies import restart
from torchjob.core.replicas import ReplicaId, node_rank


def spares_wanted(job: PyTorchJob) -> int:
    """How many idle warm spares to keep beside the job's group (0 where it does not repair in place)."""
    return int(job.annotation(extensions.SPARES) or 0) if in_place(job) else 0


# How long a repaired group may take to complete a step before the repair is given up and the group restarts.
# The survivors' own wait for a membership (torchjob.train.in_place) is as long; this also covers a member
# stuck elsewhere, e.g. inside a collective whose timeout is far longer.
REPAIR_DEADLINE = 60.0
# The longest the next warm spare waits for a repaired group's first step: past a re-form's usual time at 32
# ranks on 2 loaded cores (about 1 s), short of the silence that names a stalled joiner (3 s), so that a spare
# is warm by then to take its place...
SPARE_HELD_AT_MOST = 2.0
# ...or this many of the group's usual steps, where that is longer: the retried step of a model whose steps take
# seconds (a sharded one also gathers every unit again) must not share its cores with a spare's start either. A
# spare of such a model takes longer to warm than a stalled joiner takes to be named, whenever it starts.
SPARE_HELD_STEPS = 2.0


@dataclass(frozen=True)
class Repair:
    lost: ReplicaObservation
    spare: str
    cause: Cause  # what became of the lost replica

    def describe(self, others: int, count: int) -> str:
        return (
            f"{self.cause.text}; {self.spare} takes its place in the running group and the {others} other "
            f"replica(s) carry on (repair {count}, no restart)"
        )


def decide(
    job: PyTorchJob, attempt: int, current: list[ReplicaObservation], spares: list[SpareObservation]
) -> list[Repair]:
    """The repairs to make for the attempt's lost replicas, a ready spare each; none when the group must restart
    (a lost replica that cannot be repaired around, a survivor that cannot, or too few ready spares)."""
    failed = failed_replicas(current)
    if not failed or not all(trained_in_place(o) for o in failed):
        return []
    lost = [(o, Cause(o.describe(), restart.kind_of(o), o.failure_onset)) for o in failed]
    return _replace(job, attempt, current, spares, lost)


def spare_awaited_until(
    job: PyTorchJob,
    attempt: int,
    current: list[ReplicaObservation],
    spares: list[SpareObservation],
    since: datetime | None,
    now: datetime,
) -> datetime | None:
    """Until when the attempt's failed replicas wait for warm spares to take their places (``decide`` found too
    few ready): where every failed replica ran the in-place loop and was lost (``_lost``), every other runs and
    can be repaired around, and the job keeps as many spares as were lost; for the job's spare wait from the loss
    (``since``: when the wait began, where earlier). None: nothing to wait for, or waited long enough."""
    if not in_place(job) or job.spec.elastic_policy is not None:
        return None
    failed = failed_replicas(current)
    if not failed or not all(trained_in_place(o) and _lost(o) for o in failed):
        return None
    if len(failed) <= len(_ready(spares, attempt)):
        return None
    if not _carry_on([o for o in current if o not in failed]):
        return None
    if len(failed) > spares_wanted(job):
        return None  # more places than the job keeps spares for: they cannot all come
    onsets = [o.failure_onset for o in failed if o.failure_onset is not None]
    began = min([*onsets, *([since] if since is not None else []), now])
    until = began + timedelta(seconds=spare_wait(job))
    return until if now < until else None


def _lost(failed: ReplicaObservation) -> bool:
    """Whether a failed replica was lost (killed by a signal, gone with its Pod or node, evicted, preempted), not
    ended by its own program: an error or its memory limit (OOMKilled) a spare would meet again, or the script
    asking for the group's restart (``ShardedRepairError``: no survivor holds a shard). Nobody waits for those."""
    if failed.reason is PlatformReason.OOM_KILLED:
        return False
    if failed.reason is not None or failed.signal is not None:
        return True
    code = failed.effective_exit_code
    return code is None or code > 128  # 128 + N: killed by signal N, as a container reports it


def trained_in_place(lost: ReplicaObservation) -> bool:
    """Whether a lost replica ran the in-place loop, so that its group may carry on around it: it announced the
    loop, or this operator never heard it (a leader that took over when the lost node took the old leader with
    it): it runs the group's one script, and its peers' announcements, which the caller requires, speak for it."""
    return lost.repairable or lost.unheard_since is not None


def decide_hung(
    job: PyTorchJob,
    attempt: int,
    current: list[ReplicaObservation],
    spares: list[SpareObservation],
    culprit: ReplicaObservation,
) -> list[Repair]:
    """The repair for a hung group whose one silent replica is known (``policies/progress``): that replica is
    stopped and replaced like a lost one (its peers, blocked in a collective with it, see it fail). None when
    the group must restart."""
    if culprit.phase is not Phase.RUNNING or culprit.stopping or not culprit.repairable:
        return []
    silent_since = culprit.last_beat
    cause = Cause(f"{culprit.replica} stopped responding (hung)", "Hung", silent_since)
    return _replace(job, attempt, current, spares, [(culprit, cause)])


def decide_handover(
    job: PyTorchJob, attempt: int, current: list[ReplicaObservation], spares: list[SpareObservation]
) -> list[Repair]:
    """The handovers to make: a member the platform is evicting gracefully (its Pod being deleted under a
    DisruptionTarget, as the Eviction API and ``kubectl drain`` do; locally, a SIGTERM it noted) gives its place
    to a ready spare while it still runs. The group re-forms at its next step and the evicted member leaves it
    there, so no step is failed or retried. Static groups only (an elastic one shrinks around it instead)."""
    if job.spec.elastic_policy is not None:
        return []
    leaving = [o for o in current if o.phase is Phase.RUNNING and o.disrupted_at is not None and o.repairable]
    noticed = [
        (o, Cause(f"{o.replica} is being {_disruption(o)}", restart.kind_of(o), o.disrupted_at)) for o in leaving
    ]
    return _replace(job, attempt, current, spares, noticed) if noticed else []


def _disruption(observation: ReplicaObservation) -> str:
    return "preempted" if observation.reason is PlatformReason.PREEMPTED else "evicted"


def _replace(
    job: PyTorchJob,
    attempt: int,
    current: list[ReplicaObservation],
    spares: list[SpareObservation],
    lost: list[tuple[ReplicaObservation, Cause]],
) -> list[Repair]:
    if not in_place(job):
        return []
    gone = {o.replica for o, _ in lost}
    if not _carry_on([o for o in current if o.replica not in gone]):
        return []
    ready = _ready(spares, attempt)
    if len(ready) < len(lost):
        return []
    return [Repair(o, spare, cause) for (o, cause), spare in zip(lost, ready, strict=False)]


def failed_replicas(current: list[ReplicaObservation]) -> list[ReplicaObservation]:
    """The attempt's replicas that failed and are not being stopped: those a repair replaces. One lost with its
    node counts while its Pod is being deleted too: the platform evicts a silent node's Pods after their
    toleration (30 s on some clusters, within a wait for a spare), and its place is no less empty (once a spare
    holds it, the spare's Pod is the replica's observation: ``one_per_replica``)."""
    return [o for o in current if o.phase is Phase.FAILED and (not o.stopping or lost_with_node(o))]


def _carry_on(others: list[ReplicaObservation]) -> bool:
    """Whether the group's other replicas can be repaired around: there are some, and every one runs the in-place
    loop and is not being stopped."""
    return bool(others) and all(o.phase is Phase.RUNNING and o.repairable and not o.stopping for o in others)


def _ready(spares: list[SpareObservation], attempt: int) -> list[str]:
    """The attempt's spares that are warm and waiting, by name."""
    return sorted(s.name for s in spares if s.attempt == attempt and s.ready and not s.stopping and not s.failed)


def overdue(
    current: list[ReplicaObservation], repaired_at: datetime | None, now: datetime
) -> tuple[str | None, datetime | None]:
    """Why the last repair in place is given up (None: it completed, is not due yet, or progress is not
    reported, so nothing can be told), and when to look again while it is pending."""
    running = [o for o in current if o.phase is Phase.RUNNING and not o.stopping]
    reports = [o.progress for o in running]
    if repaired_at is None or not running or any(p is None for p in reports):
        return None, None
    if not settling(current, repaired_at):
        return None, None
    seconds = max(REPAIR_DEADLINE, 3 * usual_step(current))
    due = repaired_at + timedelta(seconds=seconds)
    if now < due:
        return None, due
    behind = ", ".join(
        sorted(str(o.replica) for o in running if o.progress is not None and o.progress.at <= repaired_at)
    )
    return f"the in-place repair did not complete within {seconds:g}s ({behind} completed no step since)", None


def settling(current: list[ReplicaObservation], repaired_at: datetime | None) -> bool:
    """Whether the group re-formed in place at ``repaired_at`` has yet to step since: a running member's last
    report is older than the repair, or a joiner has not reported yet while its peers report. False where no
    member reports progress (nothing can be told)."""
    reports = [o.progress for o in current if o.phase is Phase.RUNNING and not o.stopping]
    if repaired_at is None or all(p is None for p in reports):
        return False
    return any(p is None or p.at <= repaired_at for p in reports)


def usual_step(current: list[ReplicaObservation]) -> float:
    """The longest of the running members' usual step times, as they last reported them (0 where none did)."""
    reports = [o.progress for o in current if o.phase is Phase.RUNNING and not o.stopping]
    return max((p.seconds_per_step or 0.0 for p in reports if p is not None), default=0.0)


def holds_spares(
    current: list[ReplicaObservation], repaired_at: datetime | None, now: datetime
) -> tuple[bool, datetime | None]:
    """Whether the next warm spare waits for the group re-formed in place at ``repaired_at`` to step (its
    start, a fork and the script's imports, would slow the step the members retry), and until when. Never
    longer than ``SPARE_HELD_AT_MOST`` or ``SPARE_HELD_STEPS`` of the group's usual steps, whichever is longer: a
    joiner that stalls must not keep its own replacement from warming."""
    if not settling(current, repaired_at):
        return False, None
    assert repaired_at is not None
    until = repaired_at + timedelta(seconds=max(SPARE_HELD_AT_MOST, SPARE_HELD_STEPS * usual_step(current)))
    return (True, until) if now < until else (False, None)


def spare_actions(
    wanted: int, spares: list[SpareObservation], attempt: int, group_up: bool, rendezvous_at_store: bool = False
) -> tuple[list[Action], int]:
    """Keep ``wanted`` spares beside the attempt's group while it is up; spares of other attempts go.
    Returns the actions and how many of the attempt's spares are ready."""
    actions: list[Action] = [
        DeleteSpare(s.name, "its attempt ended" if s.attempt != attempt else "it ended on its own")
        for s in spares
        if (s.attempt != attempt or s.failed) and not s.stopping
    ]
    mine = [s for s in spares if s.attempt == attempt and not s.stopping and not s.failed]
    if group_up and len(mine) < wanted:
        actions += [CreateSpare(attempt, rendezvous_at_store) for _ in range(wanted - len(mine))]
    return actions, sum(s.ready for s in mine)


def members_in_rank_order(job: PyTorchJob, replicas: Iterable[ReplicaId]) -> tuple[str, ...]:
    """Replica names in the order of their ranks in the group (a Master first, then Workers by index)."""
    return tuple(str(r) for r in sorted(set(replicas), key=lambda r: node_rank(job, r)))


def next_membership(
    earlier: GroupMembership | None,
    attempt: int,
    members: Sequence[str],
    promoted: Sequence[tuple[str, str]],
    lost: bool = True,
) -> GroupMembership:
    """The group's next membership: ``members`` in rank order, and ``promoted`` spares (spare, the replica
    whose place it takes) joining it, one generation after ``earlier`` (the first of a new attempt is 1).
    ``lost``: members were removed without agreeing to it (lost, hung), so that members whose
    step waits on them leave it; otherwise (a handover, a spare joining) the group re-forms at its next step.

    ``spares`` keeps every promotion of the attempt: two repairs can be published before a spare looks, and
    it must still find its place in the newer one."""
    same = earlier is not None and earlier.attempt == attempt
    generation = earlier.generation + 1 if earlier is not None and same else 1
    if lost or earlier is None or not same:
        lost_in = generation if lost else 0
    else:  # an older controller's membership says nothing: its generation may have been a loss
        lost_in = earlier.generation if earlier.lost_in is None else earlier.lost_in
    return GroupMembership(
        attempt=attempt,
        generation=generation,
        members=list(members),
        joined=sorted(replica for _, replica in promoted),
        spares={**(earlier.spares if earlier is not None and same else {}), **dict(promoted)},
        lost_in=lost_in,
    )
