"""Replicas lost with their node: when to stop waiting for a node that stopped reporting.

A node whose kubelet falls silent is marked Ready=Unknown by the node lifecycle controller (after its grace
period, 40-50 s by default). Kubernetes then evicts its Pods only after their unreachable toleration (5 minutes
by default), and that eviction never completes without a kubelet to confirm it: the Pods stay Terminating, and
a group that waits for them waits forever. Kubeflow's operator does. The backend knows sooner: a kubelet that
missed a renewal of its node Lease (renewed every 10 s by default) is silent too (``SilentNode``).

But a silent kubelet is not always a lost replica: a kubelet restarted for an upgrade, or cut from the API
server alone, leaves its containers training. So a replica on a silent node is declared lost only with a
second witness of its own:

- its process, which beat on the report channel, has been silent for the liveness deadline too (a vanished VM
  silences both at once; a stopped kubelet silences neither the process nor its reports), or for
  ``UNREACHABLE_SILENCE`` where the operator cannot reach the node either (its own connection unanswered:
  a host that is gone, not a kubelet that stopped; ``backends/kubernetes/reachability.py``); for an operator
  that began to listen after it went silent (a new leader), silent since then, where the job's scripts report, or
- the platform has already decided to evict it (its DisruptionTarget condition, after the toleration): the
  only witness for a script that reports nothing.

A replica declared lost fails with reason NodeLost, the platform's doing (retried, never counted), and its
Pod is removed by force: no kubelet will confirm a graceful delete, and its name would stay taken.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from torchjob.api.types import PyTorchJob
from torchjob.core.observed import Phase, PlatformReason, ReplicaObservation
from torchjob.core.policies.progress import liveness_deadline
from torchjob.core.times import later, timestamp

# A missed beat and half another (the silence at which the operator looks at a Pod's node, nodes.QUIET_SECONDS):
# enough silence of a process whose node the operator cannot reach at all. The node's silence is the operator's own
# witness (a live host's kernel answers a connection within milliseconds, however loaded), so this only guards
# against a beat late on a loaded machine, and the loss is decided in the pass that finds the node gone.
UNREACHABLE_SILENCE = 1.5


def declare_lost(
    job: PyTorchJob, observed: list[ReplicaObservation], now: datetime, reports_heard: bool
) -> list[ReplicaObservation]:
    """``observed`` with every replica that is lost with its node as a failure (see the module's docstring).
    Silence counts only while a peer on a node that still reports beats: when every process fell silent at
    once (the job finished while only its kubelet was away), silence proves nothing."""
    allowed = liveness_deadline(job)
    peers_beat = any(
        o.silent_node is None
        and o.phase.live
        and o.last_beat is not None
        and (now - o.last_beat).total_seconds() <= allowed
        for o in observed
    )
    return [_lost(job, o, now, reports_heard and peers_beat) or o for o in observed]


def look_again_at(job: PyTorchJob, observed: list[ReplicaObservation]) -> datetime | None:
    """When a replica on a silent node, not (yet) lost, would have been silent for the liveness deadline."""
    due = [found for o in observed if (found := _lost_at(job, o)) is not None]
    return min(due) if due else None


def lost_by(job: PyTorchJob, seen: ReplicaObservation) -> datetime | None:
    """When a live replica on a node that stopped reporting and that the operator cannot reach either is declared
    lost with it, if it stays silent (``UNREACHABLE_SILENCE`` after its last beat); None for any other replica. A
    hang verdict that comes sooner (an in-place member missed three announcements) can wait for this one."""
    return _lost_at(job, seen) if seen.silent_node is not None and seen.silent_node.unreachable else None


def _lost_at(job: PyTorchJob, seen: ReplicaObservation) -> datetime | None:
    """When a live replica on a silent node is lost with it if it stays silent; None for any other replica."""
    beat = seen.last_beat if seen.progress is not None else seen.unheard_since
    if seen.silent_node is None or not seen.phase.live or beat is None:
        return None
    return later(beat, _silence_allowed(job, seen.silent_node.unreachable))


def _silence_allowed(job: PyTorchJob, unreachable: bool) -> float:
    """How long a process on a silent node may be silent before it is lost with it."""
    allowed = liveness_deadline(job)
    return min(allowed, UNREACHABLE_SILENCE) if unreachable else allowed


def _lost(job: PyTorchJob, seen: ReplicaObservation, now: datetime, reports_heard: bool) -> ReplicaObservation | None:
    node = seen.silent_node
    if node is None or not seen.phase.live:
        return None
    if seen.progress is not None and seen.progress.exiting:
        return None  # it finished and said so while its kubelet was away: silent, not lost
    beat = seen.last_beat
    if beat is None and job.status.trainer_status is not None:
        # The job's scripts report (some replica did), yet this one was not heard since this operator began
        # to listen: a leader that took over when the lost node took the old leader with it.
        beat = seen.unheard_since
    allowed = _silence_allowed(job, node.unreachable)
    silent = reports_heard and beat is not None and (now - beat).total_seconds() > allowed
    if silent and beat is not None:
        witness = f"and {seen.replica} has not beaten since {timestamp(beat)}"
        if node.unreachable:
            witness += " (the operator cannot reach the node either)"
        onset = min(node.since, beat)
    elif seen.disrupted_at is not None:
        witness = "and the platform is evicting its Pod"
        onset = node.since
    else:
        return None
    return dataclasses.replace(
        seen,
        phase=Phase.FAILED,
        reason=PlatformReason.NODE_LOST,
        message=f"node {node.name} stopped reporting at {timestamp(node.since)}, {witness}",
        finished_at=onset,
    )
