"""Restart policy: is a replica's failure permanent, or does the group restart as a new attempt?

``Never``: every failure is permanent. ``OnFailure``/``Always``: every failure is retryable. ``ExitCode``:
exit codes 1–127 are permanent (the program said so), 128–255 retryable (killed by a signal: OOM, SIGTERM).
Evicted and preempted replicas are always retryable: the platform took them, the program did nothing wrong.

The decision is taken on the attempt's *first* failure, its root cause. When one rank dies the others
usually fail next with a connection error (exit code 1); judging by those would turn a retryable SIGKILL
into a permanent failure. A replica the platform is disrupting (told to stop, still checkpointing) takes
part from the moment of its notice, so a peer crashing while it saves does not become the root cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchjob.api.types import PyTorchJob, RestartPolicy
from torchjob.core.observed import Phase, ReplicaObservation

PLATFORM_REASONS = ("Evicted", "Preempted")


@dataclass(frozen=True)
class FailureVerdict:
    root_cause: ReplicaObservation
    retryable: bool


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


def judge_failures(job: PyTorchJob, attempt: list[ReplicaObservation]) -> FailureVerdict | None:
    """The verdict on an attempt's failures, or None when nothing failed (yet).

    A replica torchjob itself is stopping (scaled down, replaced) is not failing, whatever its exit.
    """
    attempt = [o for o in attempt if not o.stopping]
    if not any(o.phase is Phase.FAILED for o in attempt):
        return None
    candidates = [o for o in attempt if o.phase is Phase.FAILED or (o.phase.live and o.disrupted_at)]

    def order(o: ReplicaObservation) -> tuple[float, bool, str]:
        # Earliest onset first (unknown times last); among ties a permanent failure wins, then by name.
        onset = o.failure_onset
        when = onset.timestamp() if onset else float("inf")
        return (when, is_retryable(restart_policy_of(job, o), o), str(o.replica))

    root = min(candidates, key=order)
    return FailureVerdict(root_cause=root, retryable=is_retryable(restart_policy_of(job, root), root))
