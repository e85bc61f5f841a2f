"""Hang detection: an attempt whose ranks all stop reporting progress for the progress deadline.

A stalled collective holds every rank of a DDP group until gloo's or NCCL's 30-minute timeout. The planner
treats an attempt in which no rank has reported progress (an optimizer step, from torchjob.train's heartbeat or
``torchjob.autoreport``) for the progress deadline as failed with reason Hung, and the group restarts. The
deadline is learned from the job's own step gaps (``policies/learned.py``) unless the annotation
``torchjob.io/progress-deadline-seconds`` sets it (Kubeflow ignores annotations); a named phase a process is in
(a checkpoint save, an evaluation: ``torchjob.sections``) has its own allowance meanwhile. Start-up is not judged
by it: until a rank of the attempt completes its first step (imports, a dataset download, a checkpoint load,
torch.compile), only the start-up allowance bounds the wait (``torchjob.io/startup-deadline-seconds``, 30
minutes by default), and only for a job known to report (an annotation, or deadlines learned before), so a
slow start is never taken for a hang, nor a script that reports nothing. A repair in place counts as progress.
The rank that stopped at the lowest step is named, and so is the one rank that stopped beating while the
others kept beating (they wait for it, blocked in a collective): a group that repairs in place replaces that
one rank instead of restarting (``policies/repair.py``).

Alive is not progressing. With no annotation at all, a process that stops beating (its reporting thread
beats every second, even while its main thread waits in a collective) while every other process of the group
beats is named within seconds, by a liveness deadline of its own (``torchjob.io/liveness-deadline-seconds``,
10 s by default): SIGSTOPped, frozen, or on a node that vanished. Only beats since the group last started
training count, so a process of an earlier attempt, or the lost member a spare replaced, is never taken for a
silent one; nor is one that said it is exiting (its last report), whose Pod may look Running a while longer, and
a group whose every process said so has finished: it is not judged by the progress deadline either.
"Nobody progresses but everyone is alive" (a deadlock) is the progress deadline's job.

Where every replica runs on the controller's machine (locally: no silence there is a lost host), two witnesses
find it sooner, under the default liveness deadline only: the process has missed its beats for
``WAITED_ON_SILENCE`` seconds, and every other process beats but has not stepped for ``WAITING_FACTOR`` times its
own longest step gap (at least ``WAITING_FLOOR``): they wait for it, blocked in a collective. A process that is
merely slow keeps beating, and one in a named phase (a checkpoint save) is left to that phase's allowance.

A silence counts only while the others were witnesses to it: from its last beat, or from when the last of them
began to beat steadily again (``torchjob/beats.py``), whichever is later. A stalled machine (a paused VM, a swap
storm) stops every process at once, and they resume one by one: the first to beat again does not make the
last look silent for the whole stall. Nor is such a stall the group's lack of progress: where every process
began to beat steadily again after the group's last step, the progress deadline counts from then.

Where the platform cannot hear the reports (an operator started without a report address), silence proves
nothing: the deadline is not enforced, and the job is told so once, in an event, rather than killed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from torchjob.api import extensions
from torchjob.api.types import LearnedDeadlines, PyTorchJob
from torchjob.core.observed import Phase, ReplicaObservation
from torchjob.core.policies import learned as learned_deadlines
from torchjob.core.policies import silent_member
from torchjob.core.times import later

# The waited-on rule (above): the silence, the others' wait against their longest step gap, and how fresh their
# beats must be (beats come every second; a loaded machine's are late by a second at times).
WAITED_ON_SILENCE = 3.5
# Past the liveness deadline by this much when the silence rule is checked: "silent for more than" the deadline.
SILENCE_CHECK_MARGIN = 0.05
WAITING_FACTOR = 3.0
WAITING_FLOOR = 2.0
FRESH_BEAT = 2.5
# How long an elastic group's re-forming (torchrun's agents at a new rendezvous round) keeps the silence rules
# off: an etcd rendezvous waits for the lost member's keep-alive to lapse, then its last call (30 s by default).
REFORM_ALLOWANCE = 180.0
# A step that came this soon after a membership change's stamp may still be the old group's: the stamp is in
# whole seconds (up to 1 s before the change was decided) and a step finished before the change is reported up
# to a heartbeat (1 s) later. Only a later step proves that a member trains in the new group.
REGROUP_STEP_MARGIN = 2.0


@dataclass(frozen=True)
class HangVerdict:
    hung: bool
    message: str = ""
    # When to look again if nothing else happens: the moment the deadline would pass.
    check_at: datetime | None = None
    # The one replica that stopped beating while every other kept beating: the one the group waits for.
    # None when that is not proven (no beats, several silent, or all of them).
    culprit: ReplicaObservation | None = None
    # When the group last made progress: the hang began then.
    began_at: datetime | None = None


HUNG = "Hung"  # the kind of a hang's cause, for counting

UNREPORTED = (
    "the progress deadline is not enforced: this operator receives no progress reports from Pods "
    "(start it with --report-address so that hangs can be detected)"
)


def startup_deadline(job: PyTorchJob) -> float:
    value = job.annotation(extensions.STARTUP_DEADLINE)
    return float(value) if value else extensions.DEFAULT_STARTUP_DEADLINE


def check(
    job: PyTorchJob,
    current: list[ReplicaObservation],
    since: datetime | None,
    now: datetime,
    reports_heard: bool = True,
    started: datetime | None = None,
    learned: LearnedDeadlines | None = None,
    generation: int = 0,
    regrouped: bool = False,
    one_host: bool = False,
) -> HangVerdict:
    """``since``: when the group last started training (its attempt's start, or its last repair in place);
    ``started``: when the group last started up (before any rank's step after it, it is starting up);
    ``learned``: the deadlines learned from the job's own steps (``policies/learned.py``); ``generation``: the
    in-place group's current generation (``policies/silent_member.py``); ``regrouped``: ``started`` is an
    elastic membership change, after which start-up lasts until every member has stepped (below); ``one_host``:
    every replica runs on this machine, where the waited-on rule applies (a cluster's silent replica may be its
    lost node, ``policies/node_loss.py``)."""
    running = [o for o in current if o.phase is Phase.RUNNING and not o.stopping]
    if since is None or not running or not reports_heard:
        return HangVerdict(False)
    suspect, confirm_at = silent_member.find(running, generation, now)
    if suspect is not None:
        said = suspect.member.heard_at if suspect.member is not None else None
        return HangVerdict(True, silent_member.describe(suspect, generation, now), culprit=suspect, began_at=said)
    restarting = regrouped and started is not None and not _all_stepped_since(current, started)
    # While torchrun's agents form the group again after a membership change, a member whose agent is still at
    # the rendezvous has no worker to beat, and nobody waits for it in a collective: the silence rules wait
    # until every member has stepped again, or for REFORM_ALLOWANCE at most.
    reforming_until = later(started, REFORM_ALLOWANCE) if restarting and started is not None else None
    if reforming_until is not None and now >= reforming_until:
        reforming_until = None
    beating = _not_exiting(running)
    verdict = (
        (_waited_on(job, beating, since, now) if one_host and reforming_until is None else None)
        or (_silent_while_others_beat(job, beating, since, now) if reforming_until is None else None)
        or _progress(job, running, since, now, started, learned, restarting)
    )
    if verdict.hung:
        return verdict
    # Looked at again when the next of these is due: the end of a re-forming, a silent member to confirm, and the
    # moment the quietest process would pass its liveness deadline (not whenever reports next wake the job).
    silence = _silence_due(job, beating, now) if reforming_until is None else None
    due = [d for d in (reforming_until, confirm_at, silence, verdict.check_at) if d is not None]
    return replace(verdict, check_at=min(due)) if due else verdict


def _not_exiting(running: list[ReplicaObservation]) -> list[ReplicaObservation]:
    """The processes whose silence can mean a hang: not one that said it is exiting (its last report). That one
    went silent on purpose, and its Pod may look Running for seconds more (a loaded node's kubelet reports the
    exit late) while a peer, finishing too, still beats."""
    return [o for o in running if o.progress is None or not o.progress.exiting]


def _silence_due(job: PyTorchJob, running: list[ReplicaObservation], now: datetime) -> datetime | None:
    """The next moment a running process, beating now, would have been silent for the liveness deadline (one
    silent already was judged by this pass)."""
    allowed = liveness_deadline(job)
    if allowed <= 0 or len(running) < 2:
        return None
    witnessed = _witnessed_from(running)
    since = [witnessed(o) for o in running]
    due = [later(s, allowed + SILENCE_CHECK_MARGIN) for s in since if s is not None]
    return min((d for d in due if d > now), default=None)


def _witnessed_from(group: list[ReplicaObservation]) -> Callable[[ReplicaObservation], datetime | None]:
    """For a member of ``group``: from when the rest witnessed its silence, its last beat or when the last of
    them began to beat steadily again after a stall of its own, whichever is later (module docstring). The two
    latest steady runs are found once, so judging every member costs one pass over the group, not one each."""
    steady = [(o.progress.beating_since, o) for o in group if o.progress is not None and o.progress.beating_since]
    latest = heapq.nlargest(2, steady, key=lambda pair: pair[0])

    def since(culprit: ReplicaObservation) -> datetime | None:
        if culprit.last_beat is None:
            return None
        others = [at for at, o in latest if o is not culprit][:1]
        return max([culprit.last_beat, *others])

    return since


def _progress(
    job: PyTorchJob,
    running: list[ReplicaObservation],
    since: datetime,
    now: datetime,
    started: datetime | None,
    learned: LearnedDeadlines | None,
    restarting: bool = False,
) -> HangVerdict:
    """Nobody progresses: the progress deadline (learned or set), with phases and start-up allowed for
    (``restarting``: the group is still starting up again after a membership change)."""
    seconds, source = learned_deadlines.progress_deadline(job.metadata.annotations or {}, learned)
    if source == learned_deadlines.OFF or not _not_exiting(running):
        # Every process still seen running said it is exiting: the group finished training, and its Pods may
        # look Running a while longer (a loaded node's kubelet reports the exits late).
        return HangVerdict(False)
    first = started or since
    if restarting or not any(o.progress is not None and o.progress.at > first for o in running):
        # A script that never reported may report nothing at all: only a job known to report is judged.
        return HangVerdict(False) if source == learned_deadlines.LEARNING else _starting_up(job, first, now)
    if seconds is None:
        # Steps, but no process has warmed up yet: the start-up allowance bounds each wait meanwhile.
        seconds, source = startup_deadline(job), "start-up allowance, while the deadline is learned"
    last = {o.replica: max(o.progress.at if o.progress else since, since) for o in running}
    newest = max(last.values())
    due = max([later(max(newest, _all_resumed(running) or newest), seconds), *_phase_ends(job, running, learned)])
    if now < due:
        return HangVerdict(False, check_at=due)
    steps = {o.replica: o.progress.step if o.progress else None for o in running}
    known = [r for r in running if steps[r.replica] is not None]
    if known:
        lowest = min(step for step in steps.values() if step is not None)
        stopped = sorted((r for r in known if steps[r.replica] == lowest), key=lambda r: str(r.replica))
        silence = max((now - last[r.replica]).total_seconds() for r in stopped)
        names = ", ".join(str(r.replica) for r in stopped)
        detail = f"{names} stopped at step {lowest} (silent for {silence:.0f}s)"
        ahead = sorted({s for s in steps.values() if s is not None and s != lowest})
        if ahead:
            detail += f", the others at step {', '.join(map(str, ahead))}"
    else:
        detail = "no rank reported any progress"
    culprit = _stopped_beating(_not_exiting(running), since, now, seconds / 2)
    if culprit is not None:
        detail += f"; {culprit.replica} stopped responding, the others wait for it"
    message = f"Hung: no progress for {seconds:g}s (progress deadline: {_origin(source, learned)}); {detail}"
    return HangVerdict(True, message, culprit=culprit, began_at=newest)


def _all_resumed(running: list[ReplicaObservation]) -> datetime | None:
    """When every process had begun to beat steadily again, where all of them say so: after a stall of the whole
    machine past the group's last step, the group could progress only from then. One process's stall alone does
    not move it (a deadlocked group on a loaded machine is still found)."""
    steady = [o.progress.beating_since if o.progress is not None else None for o in running]
    return None if any(s is None for s in steady) else min(s for s in steady if s is not None)


def _all_stepped_since(current: list[ReplicaObservation], started: datetime) -> bool:
    """Whether every live member of the group has stepped since ``started``. After an elastic membership
    change torchrun's agents start every worker again, but not at once: a survivor may still step in the old
    group until its agent sees the joiner, then start cold. One member's step proves nothing then; the
    joiner's does not come before the new group trains."""
    members = [o for o in current if o.phase.live and not o.stopping]
    settled = later(started, REGROUP_STEP_MARGIN)
    return all(o.progress is not None and o.progress.at > settled for o in members)


def _phase_ends(job: PyTorchJob, running: list[ReplicaObservation], learned: LearnedDeadlines | None) -> list[datetime]:
    """When the named phases the processes are in (a checkpoint save, an evaluation) run out of allowance:
    while one runs, the group is not judged by the step deadline."""
    ends = []
    for o in running:
        progress = o.progress
        if progress is not None and progress.section is not None and progress.section_since is not None:
            allowance = learned_deadlines.section_allowance(job, learned, progress.section)
            ends.append(later(progress.section_since, allowance))
    return ends


def _origin(source: str, learned: LearnedDeadlines | None) -> str:
    if source == learned_deadlines.LEARNED and learned is not None:
        gap = learned.longest_step_gap_seconds or 0.0
        return f"learned, {learned_deadlines.SAFETY_FACTOR:g}x the longest step gap seen ({gap:.2f}s) or more"
    return source


def liveness_deadline(job: PyTorchJob) -> float:
    value = job.annotation(extensions.LIVENESS_DEADLINE)
    return float(value) if value else extensions.DEFAULT_LIVENESS_DEADLINE


def _silent_while_others_beat(
    job: PyTorchJob, running: list[ReplicaObservation], since: datetime, now: datetime
) -> HangVerdict | None:
    """The one process that stopped beating for the liveness deadline while every other beat within half of it;
    only when every running process has beaten since ``since`` (a group of one has nobody to compare with)."""
    allowed = liveness_deadline(job)
    beats = [o.last_beat for o in running]
    if allowed <= 0 or len(running) < 2 or any(b is None or b <= since for b in beats):
        return None
    quiet = [
        (o, b) for o, b in zip(running, beats, strict=True) if b is not None and (now - b).total_seconds() > allowed
    ]
    if len(quiet) != 1:
        return None
    culprit, last = quiet[0]
    others = [(o, b) for o, b in zip(running, beats, strict=True) if o is not culprit]
    if any(b is not None and (now - b).total_seconds() > allowed / 2 for _, b in others):
        # The others are silent too, just not for as long: a stalled machine stops every process within a beat or
        # two of each other, and the first to stop would pass the deadline a beat before the rest.
        return None
    if any(_stepped_on_without(o, last, allowed / 2) for o, _ in others):
        return None
    witnessed = _witnessed_from(running)(culprit)
    if witnessed is None or (now - witnessed).total_seconds() <= allowed:
        return None  # the others stalled too, and have beaten steadily again only since
    silence = (now - last).total_seconds()
    message = (
        f"Hung: {culprit.replica} stopped beating while the others beat (silent for {silence:.0f}s, liveness "
        f"deadline {allowed:g}s); {culprit.replica} stopped responding, the others wait for it"
    )
    return HangVerdict(True, message, culprit=culprit, began_at=last)


def _stepped_on_without(other: ReplicaObservation, silent_since: datetime, grace: float) -> bool:
    """Whether ``other`` stepped well after the silent one's last beat, so it does not wait for it: a member of a
    group blocked on a frozen process finishes at most the step in flight. Such silence is a member between
    workers (its torchrun agent at the rendezvous while the others' new group trains on without it yet), not one
    the group waits for; the progress deadline still judges the group."""
    report = other.progress
    if report is None:
        return False
    return report.at > later(silent_since, max(grace, report.longest_gap or 0.0))


def _waited_on(
    job: PyTorchJob, running: list[ReplicaObservation], since: datetime, now: datetime
) -> HangVerdict | None:
    """The one process silent for ``WAITED_ON_SILENCE`` while every other beats and waits in its step far past
    its longest step gap; only under the default liveness deadline, and only where every process has beaten
    since ``since`` and said how long its steps take."""
    if job.annotation(extensions.LIVENESS_DEADLINE) or len(running) < 2:
        return None
    reports = [o.progress for o in running]
    if any(p is None or p.alive_at is None or p.alive_at <= since or p.exiting for p in reports):
        return None

    def silence(o: ReplicaObservation) -> float:
        assert o.progress is not None and o.progress.alive_at is not None
        return (now - o.progress.alive_at).total_seconds()

    def waits(o: ReplicaObservation) -> bool:
        p = o.progress
        assert p is not None
        if p.longest_gap is None or p.gaps_seen < 1:
            return False
        stuck = (now - max(p.at, since)).total_seconds()
        return silence(o) <= FRESH_BEAT and stuck > max(WAITING_FACTOR * p.longest_gap, WAITING_FLOOR)

    quiet = [o for o in running if silence(o) > WAITED_ON_SILENCE]
    if len(quiet) != 1 or quiet[0].progress is None or quiet[0].progress.section is not None:
        return None
    culprit = quiet[0]
    if not all(waits(o) for o in running if o is not culprit):
        return None
    witnessed = _witnessed_from(running)(culprit)
    if witnessed is None or (now - witnessed).total_seconds() <= WAITED_ON_SILENCE:
        return None  # the others stalled too, and have beaten steadily again only since
    assert culprit.progress is not None
    message = (
        f"Hung: {culprit.replica} stopped beating while the others beat (silent for {silence(culprit):.1f}s; "
        "the others wait in their step, far past their longest step gap); "
        f"{culprit.replica} stopped responding, the others wait for it"
    )
    return HangVerdict(True, message, culprit=culprit, began_at=culprit.progress.alive_at)


def _starting_up(job: PyTorchJob, started: datetime, now: datetime) -> HangVerdict:
    """Before the attempt's first step, only the start-up allowance bounds the wait."""
    allowance = startup_deadline(job)
    due = later(started, allowance)
    if now < due:
        return HangVerdict(False, check_at=due)
    message = (
        f"Hung: no step completed within {allowance:g}s of the attempt's start (start-up allowance, "
        f"{extensions.STARTUP_DEADLINE}); no rank reported any progress"
    )
    return HangVerdict(True, message, began_at=started)


def _stopped_beating(
    running: list[ReplicaObservation], since: datetime, now: datetime, quiet: float
) -> ReplicaObservation | None:
    """The one replica silent for more than ``quiet`` seconds while every other beat within them (one that
    never beat is silent since ``since``). A process blocked in a collective still beats (its reporting
    thread runs); a stopped or frozen one does not. None where nobody beats (a script without reports)."""

    witnessed = _witnessed_from(running)

    def silent(o: ReplicaObservation) -> bool:
        return (now - max(witnessed(o) or since, since)).total_seconds() > quiet

    quiet_ones = [o for o in running if silent(o)]
    return quiet_ones[0] if len(quiet_ones) == 1 and len(running) > 1 else None


def deadlines_in_force(
    annotations: Mapping[str, str], learned: LearnedDeadlines | None = None
) -> list[tuple[str, float | None, str]]:
    """The hang deadlines a job with these annotations and learned deadlines runs under: (name, seconds or None
    when off or not yet known, where the value came from). What ``torchjob get`` shows, from the same defaults
    and the same learned values the checks above use."""
    found: list[tuple[str, float | None, str]] = []
    for name, key, default in (
        ("liveness", extensions.LIVENESS_DEADLINE, extensions.DEFAULT_LIVENESS_DEADLINE),
        ("start-up", extensions.STARTUP_DEADLINE, extensions.DEFAULT_STARTUP_DEADLINE),
    ):
        value = annotations.get(key)
        seconds = float(value) if value else default
        found.append((name, None if name == "liveness" and seconds == 0 else seconds, key if value else "default"))
    progress_seconds, source = learned_deadlines.progress_deadline(annotations, learned)
    if source == learned_deadlines.LEARNING:
        source = f"{learned_deadlines.LEARNING} from the first {learned_deadlines.WARMUP_GAPS} steps"
    elif source == learned_deadlines.OFF:
        source = extensions.PROGRESS_DEADLINE
    found.append(("progress", progress_seconds, _origin(source, learned)))
    value = annotations.get(extensions.SECTION_DEADLINE)
    if value:
        found.append(("each phase", float(value), extensions.SECTION_DEADLINE))
    else:
        for phase, seconds in sorted((learned.section_seconds if learned is not None else {}).items()):
            found.append((phase, float(seconds), learned_deadlines.LEARNED))
        found.append(("other phases", learned_deadlines.SECTION_FLOOR, "default"))
    return found
