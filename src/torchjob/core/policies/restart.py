"""Restart policy: is a replica's failure permanent, or does the group restart as a new attempt?

``Never``: every failure is permanent. ``OnFailure``/``Always``: every failure is retryable. ``ExitCode``:
exit codes 1–127 are permanent (the program said so), 128–255 retryable (killed by a signal: OOM, SIGTERM).
Evicted and preempted replicas, and those lost with their node, are always retryable: the platform took them,
the program did nothing wrong.

The decision is taken on the attempt's *first* failure, its root cause. When one rank dies the others
usually fail next with a connection error (exit code 1); judging by those would turn a retryable SIGKILL
into a permanent failure. A replica the platform is disrupting (told to stop, still checkpointing) takes
part from the moment of its notice, so a peer crashing while it saves does not become the root cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from torchjob.api.types import ConditionType, JobStatus, PyTorchJob, RestartPolicy
from torchjob.core import conditions
from torchjob.core.observed import Phase, PlatformReason, ReplicaObservation
from torchjob.core.replicas import expected_replicas

# The platform's doing, not the program's: retried whatever the restart policy, and never counted.
PLATFORM_REASONS = (
    PlatformReason.EVICTED,
    PlatformReason.PREEMPTED,
    PlatformReason.VANISHED,
    PlatformReason.NODE_LOST,
)


# A root cause that reads as a lost peer, while others of the group still run, is held this long after it began:
# the rank it lost may yet be seen failing. A kubelet reports each Pod's end on its own (a killed rank cannot
# report at all), so the peer that lost its connection is sometimes seen first. Bounded: a rank that never shows
# a failure (hung, or on a silent node) leaves the lost-peer failure the root cause after it.
PEER_REPORT_SECONDS = 3.0


@dataclass(frozen=True)
class FailureVerdict:
    root_cause: ReplicaObservation
    retryable: bool
    # Not yet: judge again at this time (see PEER_REPORT_SECONDS).
    held_until: datetime | None = None


def restart_policy_of(job: PyTorchJob, observation: ReplicaObservation) -> RestartPolicy:
    spec = job.spec.pytorch_replica_specs[observation.replica.replica_type]
    return spec.restart_policy or RestartPolicy.ON_FAILURE


def is_retryable(policy: RestartPolicy, observation: ReplicaObservation) -> bool:
    if observation.reason in PLATFORM_REASONS:
        return True
    if policy is RestartPolicy.NEVER:
        return False
    if policy is RestartPolicy.EXIT_CODE:
        code = observation.effective_exit_code
        return code is not None and 128 <= code <= 255
    return True


def judge_failures(job: PyTorchJob, attempt: list[ReplicaObservation], now: datetime) -> FailureVerdict | None:
    """The verdict on an attempt's failures, or None when nothing failed (yet); a verdict ``held_until`` a time
    while its root cause may be a lost peer's echo (PEER_REPORT_SECONDS).

    In an elastic job, a replica being stopped (scaled down, or a lost member's remains) is not failing,
    whatever its exit. A static group's replicas are only stopped once their attempt has ended, so one being
    stopped in the current attempt was deleted from outside, which is a failure like any other.
    """
    if job.spec.elastic_policy is not None:
        attempt = [o for o in attempt if not o.stopping]
    if not any(o.phase is Phase.FAILED for o in attempt):
        return None
    candidates = [o for o in attempt if o.phase is Phase.FAILED or (o.phase.live and o.disrupted_at)]

    def order(o: ReplicaObservation) -> tuple[float, bool, bool, str]:
        # Earliest onset first (unknown times last). A Pod's finish time has a resolution of one second, so
        # the killed rank and the peer that lost its connection to it often tie: among ties, a failure that
        # reads as a lost peer yields to one that does not, then a permanent failure wins, then by name.
        onset = o.failure_onset
        when = onset.timestamp() if onset else float("inf")
        return (when, _lost_a_peer(o), is_retryable(restart_policy_of(job, o), o), str(o.replica))

    root = min(candidates, key=order)
    if _lost_a_peer(root) and root.failure_onset is not None:
        # The rank it lost, seen failing within the hold, is the root cause even when its end was recorded
        # after the echo's (a killed process's end is noted when it is reaped, its peer's error can come first).
        due = root.failure_onset + timedelta(seconds=PEER_REPORT_SECONDS)
        lost = [o for o in candidates if not _lost_a_peer(o) and o.failure_onset is not None and o.failure_onset <= due]
        root = min(lost, key=order, default=root)
    held = _peer_may_report(root, attempt, now)
    return FailureVerdict(root, is_retryable(restart_policy_of(job, root), root), held_until=held)


def _peer_may_report(root: ReplicaObservation, attempt: list[ReplicaObservation], now: datetime) -> datetime | None:
    onset = root.failure_onset
    if onset is None or not _lost_a_peer(root) or not any(o.phase.live for o in attempt if o is not root):
        return None
    due = onset + timedelta(seconds=PEER_REPORT_SECONDS)
    return due if now < due else None


# What gloo, NCCL and the TCPStore say when the other end of a connection died: the mark of a peer's failure.
_PEER_LOST = re.compile(r"connection (reset|closed) by peer|broken pipe|econnreset|connection refused", re.IGNORECASE)


def _lost_a_peer(observation: ReplicaObservation) -> bool:
    return observation.exit_code != 0 and bool(_PEER_LOST.search(observation.message or ""))


def vanished_replicas(
    job: PyTorchJob, status: JobStatus, attempt: list[ReplicaObservation]
) -> list[ReplicaObservation]:
    """Replicas of a static group that was running (every member seen up) but are no longer observed at all.

    They are reported as failed with reason Vanished, so the attempt ends and the whole group restarts,
    instead of a lone replacement waiting forever for a group that has moved on. Elastic jobs re-form
    around a missing member instead (see the elastic policy).
    """
    if job.spec.elastic_policy is not None or not conditions.is_true(status, ConditionType.RUNNING) or not attempt:
        return []
    present = {o.replica for o in attempt}
    generation = attempt[0].attempt
    record = next((a for a in status.attempts if a.attempt == generation), None)
    disrupted = record.disrupted if record is not None else {}
    # A replica the platform was seen disrupting is gone because of that: say so, not just "vanished".
    return [
        ReplicaObservation(replica, generation, Phase.FAILED, reason=_reason(disrupted.get(str(replica))))
        for replica in expected_replicas(job)
        if replica not in present
    ]


def remember_disruptions(status: JobStatus, attempt: list[ReplicaObservation]) -> None:
    """Note in the attempt's record which replicas the platform is disrupting (see ``vanished_replicas``)."""
    record = next((a for a in status.attempts if attempt and a.attempt == attempt[0].attempt), None)
    if record is None:
        return
    for o in attempt:
        if o.disrupted_at is not None and o.reason in PLATFORM_REASONS:
            record.disrupted.setdefault(str(o.replica), o.reason.value)


def _reason(recorded: str | None) -> PlatformReason:
    """The disruption an attempt record remembers, or Vanished when it remembers none."""
    try:
        return PlatformReason(recorded) if recorded else PlatformReason.VANISHED
    except ValueError:
        return PlatformReason.VANISHED


def kind_of(observation: ReplicaObservation) -> str:
    """A failure's kind, for counting: the platform's reason, else how the replica ended."""
    if observation.reason is not None:
        return observation.reason.value
    if observation.signal is not None:
        return "Signal"
    return "ExitCode" if observation.exit_code is not None else "Failed"
