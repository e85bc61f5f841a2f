"""Reading Pods back: a ReplicaObservation from a Pod (and its Node) as the API server reports them.

The pure twin of ``backends/local/observing.py``: phase, exit code or signal, the platform's reason (a
DisruptionTarget condition, an eviction, OOMKilled), the crash's last lines from the termination message,
and for a live Pod why it waits (a container's waiting reason, or its Node not being Ready). No I/O, so it
is golden-tested.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from torchjob.api.types import DEFAULT_CONTAINER_NAME, ReplicaType
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.core import replicas
from torchjob.core.observed import Phase, PlatformReason, ReplicaObservation, SilentNode, SpareObservation
from torchjob.core.replicas import ReplicaId
from torchjob.core.reported import MemberAnnouncement

# Pod conditions the API server or the kubelet add when the platform takes a Pod away (Kubernetes ≥ 1.26).
_DISRUPTION_CONDITION = "DisruptionTarget"
_PREEMPTION_REASONS = ("PreemptionByScheduler", "PreemptionByKubeScheduler")
_MAX_MESSAGE = 600


def replica_of(pod: dict[str, Any]) -> tuple[ReplicaId, int] | None:
    """Which replica and attempt a Pod is, from its labels; None for a Pod that is not a replica."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    try:
        rtype = ReplicaType(labels[replicas.LABEL_REPLICA_TYPE].capitalize())
        return ReplicaId(rtype, int(labels[replicas.LABEL_REPLICA_INDEX])), int(labels.get(replicas.LABEL_ATTEMPT, 0))
    except (KeyError, ValueError):
        return None


def role_of(pod: dict[str, Any]) -> str | None:
    """``torchjob.io/role`` of a job's Pod that is not a replica: the rendezvous store, a warm spare."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(replicas.LABEL_ROLE)


def one_per_replica(observed: list[ReplicaObservation]) -> list[ReplicaObservation]:
    """One observation per replica and attempt. Right after an in-place repair two Pods carry a replica's
    labels for a moment (the promoted spare, and the lost Pod being deleted): the one that is not going wins."""
    chosen: dict[tuple[str, int], ReplicaObservation] = {}
    for seen in observed:
        key = (str(seen.replica), seen.attempt)
        kept = chosen.get(key)
        if kept is None or (kept.stopping and not seen.stopping):
            chosen[key] = seen
    return list(chosen.values())


def node_in_doubt(pod: dict[str, Any]) -> str | None:
    """The node of a Pod that is Running (or Unknown) but not Ready: the node lifecycle controller marks a lost
    node's Pods so (its containers may well still run). Only then is the Node worth reading; None otherwise."""
    status = pod.get("status") or {}
    ready = _condition(status, "Ready")
    if status.get("phase") not in ("Running", "Unknown") or ready is None or ready.get("status") == "True":
        return None
    return str((pod.get("spec") or {}).get("nodeName") or "") or None


def node_lost(node: dict[str, Any] | None) -> bool:
    """The node stopped reporting: its kubelet has not been heard for the node monitor's grace period, and the
    node lifecycle controller set its Ready condition to Unknown (a vanished VM, a cut link, or only a stopped
    kubelet: the planner tells them apart). A node that reports itself not ready (Ready False: its runtime is
    down, say) still has a kubelet that will act on its Pods: it is not lost."""
    ready = _condition((node or {}).get("status") or {}, "Ready")
    return ready is not None and ready.get("status") == "Unknown"


# The kubelet renews its node Lease every quarter of the lease's duration (a fixed fraction; 10 s by default).
_RENEWALS_PER_LEASE = 4
# A lease older than this many renewal intervals: the kubelet missed a renewal (not merely a late one).
_MISSED_RENEWAL = 1.25


def silent_node(
    name: str, node: dict[str, Any] | None, lease: dict[str, Any] | None, now: datetime, unreachable: bool = False
) -> SilentNode | None:
    """Whether node ``name`` stopped reporting, and since when: the node lifecycle controller declared it
    (``node``'s Ready=Unknown; 40-50 s after the fact by default), its kubelet missed a renewal of its Lease
    in ``kube-node-lease`` (``lease``: seconds after the fact), or the operator cannot reach it
    (``unreachable``, ``reachability.py``: a second after the fact; silent since its last renewal). None while
    it reports, or when unknown."""
    if node is not None and node_lost(node):
        ready = _condition(node.get("status") or {}, "Ready") or {}
        since = parse_time(ready.get("lastHeartbeatTime")) or parse_time(ready.get("lastTransitionTime"))
        if since is not None:
            return SilentNode(name, since, unreachable)
    spec = (lease or {}).get("spec") or {}
    renewed = parse_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int) or duration <= 0:
        return SilentNode(name, now, unreachable) if unreachable else None
    overdue = (now - renewed).total_seconds() > _MISSED_RENEWAL * duration / _RENEWALS_PER_LEASE
    return SilentNode(name, renewed, unreachable) if overdue or unreachable else None


def _node_problem(node: dict[str, Any] | None) -> str | None:
    """What is wrong with a Pod's node, in words, or None when it is Ready (or unknown)."""
    if node is None:
        return None
    ready = _condition(node.get("status") or {}, "Ready")
    if ready is None or ready.get("status") == "True":
        return None
    name = (node.get("metadata") or {}).get("name", "?")
    since = ready.get("lastTransitionTime", "")
    return f"node {name} is not ready ({ready.get('reason') or 'NotReady'} since {since}): waiting for it to return"


def observe_pod(
    pod: dict[str, Any], node: dict[str, Any] | None = None, silent: SilentNode | None = None
) -> ReplicaObservation | None:
    """A Pod as the planner sees it: phase, exit code or signal, the platform's reason, the crash's last lines;
    for a live Pod, why it is waiting (a container's waiting reason, or ``node``, its Node, not being Ready),
    and ``silent``, its node having stopped reporting (``silent_node``)."""
    identity = replica_of(pod)
    if identity is None:
        return None
    replica, attempt = identity
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    stopping = metadata.get("deletionTimestamp") is not None
    disruption = _condition(status, _DISRUPTION_CONDITION)
    platform_reason: PlatformReason | None = None
    disrupted_at: datetime | None = None
    if disruption is not None and disruption.get("status") == "True":
        preempted = disruption.get("reason") in _PREEMPTION_REASONS
        platform_reason = PlatformReason.PREEMPTED if preempted else PlatformReason.EVICTED
        disrupted_at = parse_time(disruption.get("lastTransitionTime"))
    if status.get("reason") == PlatformReason.EVICTED.value:
        platform_reason = PlatformReason.EVICTED
    phase = {"Pending": Phase.PENDING, "Running": Phase.RUNNING, "Succeeded": Phase.SUCCEEDED}.get(
        status.get("phase") or "Pending", Phase.FAILED
    )
    if status.get("phase") == "Unknown":
        phase = Phase.RUNNING  # the node's kubelet lost touch with the API server without being declared lost
    terminated = _terminated_state(status)
    if phase is Phase.SUCCEEDED:
        # One being deleted (a member that left its group, evicted or scaled down) did not finish the job's work.
        finished_at = parse_time((terminated or {}).get("finishedAt"))
        return ReplicaObservation(replica, attempt, phase, exit_code=0, finished_at=finished_at, stopping=stopping)
    if phase is not Phase.FAILED:
        waiting = _node_problem(node) or _unschedulable(status) or _waiting_message(status)
        return ReplicaObservation(
            replica,
            attempt,
            phase,
            reason=platform_reason,
            message=waiting,
            stopping=stopping,
            disrupted_at=disrupted_at,
            silent_node=silent,
        )
    terminated = terminated or {}
    reason = platform_reason
    if terminated.get("reason") == PlatformReason.OOM_KILLED.value:
        reason = PlatformReason.OOM_KILLED
    exit_code = terminated.get("exitCode")
    message = (terminated.get("message") or status.get("message") or "").strip()
    return ReplicaObservation(
        replica,
        attempt,
        Phase.FAILED,
        exit_code=int(exit_code) if exit_code is not None else None,
        reason=reason,
        message=last_lines(message) or None,
        finished_at=parse_time(terminated.get("finishedAt")) or parse_time(status.get("startTime")),
        stopping=stopping,
        disrupted_at=disrupted_at,
    )


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def _terminated_state(status: dict[str, Any]) -> dict[str, Any] | None:
    """The trainer container's termination (``pytorch``, or a TrainJob's ``node``), or the first terminated
    container's."""
    statuses = status.get("containerStatuses") or []
    ordered = sorted(statuses, key=lambda s: s.get("name") not in (DEFAULT_CONTAINER_NAME, replicas.TRAINER_CONTAINER))
    for container in ordered:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return dict(terminated)
    return None


def _unschedulable(status: dict[str, Any]) -> str | None:
    """The scheduler's own words for a Pod it cannot place ("0/3 nodes are available: 3 Insufficient
    nvidia.com/gpu. ..."), which otherwise only ``kubectl describe pod`` shows."""
    scheduled = _condition(status, "PodScheduled") or {}
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return last_lines(str(scheduled.get("message") or "Unschedulable"))
    return None


def _waiting_message(status: dict[str, Any]) -> str | None:
    """Why a Pod is not running yet (ErrImagePull, CreateContainerConfigError...), for the user to see."""
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] not in ("ContainerCreating", "PodInitializing"):
            return f"{waiting['reason']}: {waiting.get('message', '')}".strip(": ")
    return None


def last_lines(message: str) -> str:
    """The last three non-empty lines of a crash's output, on one line, shortened from the left."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    text = " | ".join(lines[-3:])
    return text if len(text) <= _MAX_MESSAGE else "…" + text[-_MAX_MESSAGE:]


def parse_time(value: Any) -> datetime | None:
    """An API server timestamp; None when absent or not one."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def with_reports(
    board: ReportBoard | None, seen: ReplicaObservation | None, pod: dict[str, Any]
) -> ReplicaObservation | None:
    """A replica with what its Pod last told the operator (filed by Pod uid, see report_board.py): whether it
    trains under the in-place loop of its attempt (a lost one too: the planner repairs around it) and what it
    last announced there, and, while it runs or once it succeeded, its progress."""
    if seen is None or board is None:
        return seen
    uid = pod["metadata"].get("uid")
    progress = board.latest(uid) if seen.phase in (Phase.RUNNING, Phase.SUCCEEDED) else None
    member = board.announcement(uid, seen.attempt)
    unheard = board.listening_since if progress is None and seen.phase is Phase.RUNNING else None
    return replace(seen, progress=progress, repairable=member is not None, member=member, unheard_since=unheard)


def member_of(board: ReportBoard | None, pod: dict[str, Any]) -> MemberAnnouncement | None:
    """What a replica's Pod last announced as a member of an in-place group, in the attempt it belongs to."""
    found = replica_of(pod)
    if board is None or found is None:
        return None
    return board.announcement(pod["metadata"].get("uid"), found[1])


def observe_spare(board: ReportBoard | None, pod: dict[str, Any]) -> SpareObservation | None:
    """A spare Pod: ready once it runs and announced that it is warm."""
    labels = pod["metadata"].get("labels") or {}
    try:
        attempt = int(labels.get(replicas.LABEL_ATTEMPT, ""))
    except ValueError:
        return None
    phase = (pod.get("status") or {}).get("phase")
    announced = board is not None and board.announced(pod["metadata"].get("uid"), attempt)
    return SpareObservation(
        pod["metadata"]["name"],
        attempt,
        ready=phase == "Running" and announced,
        stopping=pod["metadata"].get("deletionTimestamp") is not None,
        failed=phase in ("Failed", "Succeeded"),
    )
