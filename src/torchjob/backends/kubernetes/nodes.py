"""The nodes under a job's Pods, read only when a Pod gives a reason: a pass that finds every Pod well reads none.

- A Pod Running but not Ready: its Node. The node lifecycle controller marks a lost node's Pods so, and the Node
  says why (its Ready condition), for the job's status and for ``observing.silent_node``.
- A Pod whose process beat on the report channel and then went quiet for ``QUIET_SECONDS``: its node's Lease in
  ``kube-node-lease``, which the kubelet renews every quarter of its duration (10 s by default). A kubelet that
  missed a renewal is known seconds after a node vanished, where the node lifecycle controller waits for its
  grace period (40-50 s by default). Silence of both, the process and its kubelet, is what
  ``core/policies/node_loss.py`` needs to declare the replica lost.
- The same Pod's node, probed by the operator itself (``reachability.py``): a node that answers nothing is
  known a second after it vanished, and lets ``node_loss`` act on a shorter silence of the process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node

from torchjob.backends.kubernetes import observing
from torchjob.backends.kubernetes.cluster import as_dict
from torchjob.backends.kubernetes.reachability import Reachability
from torchjob.core.observed import SilentNode
from torchjob.core.policies import silent_member
from torchjob.core.reported import MemberAnnouncement, Progress

log = logging.getLogger("torchjob.operator")

NODE_LEASES = "kube-node-lease"
# One missed beat and half another (a process beats every second): quiet enough to look at its node (a Lease
# read, a connection tried), never a verdict alone.
QUIET_SECONDS = 1.5
# The nodes a Pod was kept off when torchjob made it (``NodeReader.keep_off_silent``), comma-separated.
KEPT_OFF = "torchjob.io/kept-off-nodes"
# How long the node of a replica removed while running is a suspect (``NodeReader.suspect``).
SUSPECT_SECONDS = 60.0


class NodeReader:
    def __init__(self, client: Client, count: Callable[[str], None]) -> None:
        self.client = client
        self.count = count
        # Every node found silent, until its kubelet reports again: Pods created meanwhile are kept off it
        # (the scheduler places Pods on a vanished node until Kubernetes taints it, tens of seconds later).
        self.avoided: dict[str, SilentNode] = {}
        self._found_silent_at: dict[str, datetime] = {}  # when each avoided node was found silent (this clock)
        # The operator's workers reconcile several jobs at once: what they learn of nodes is shared, under this lock
        # (held for the bookkeeping only, never while the API server or a node is asked).
        self._lock = threading.Lock()
        self.reach = Reachability(lambda name: self._get(Node, name))
        self.suspects: dict[str, float] = {}  # node → when a replica running on it was removed (monotonic)

    def for_pods(
        self,
        pods: list[dict[str, Any]],
        progress_of: Callable[[dict[str, Any]], Progress | None],
        member_of: Callable[[dict[str, Any]], MemberAnnouncement | None] = lambda _pod: None,
    ) -> tuple[dict[str, dict[str, Any] | None], dict[str, SilentNode]]:
        """The Nodes of Pods in doubt (by name), and the nodes among all the Pods' that stopped reporting.
        ``member_of``: what a Pod last announced as a member of an in-place group in its attempt."""
        now = datetime.now(timezone.utc)
        in_doubt = {observing.node_in_doubt(p) for p in pods} - {None}
        nodes = {name: self._get(Node, name) for name in in_doubt if name}
        running = [p for p in pods if _running(p)]
        # Every node under a running Pod, once: a node may vanish a second after its Pods' first report.
        self.reach.learn({_node_of(p) for p in running} - {""})
        # Quiet: under a process that stopped beating, a replica never heard while others of the job report (its
        # reports may not arrive at all), a suspect (a replica running there was just removed, perhaps lost with
        # it; a Pod that never beats, such as the rendezvous store, may share its fate), or an in-place member
        # that missed its announcements (``silent_member``): its node unreachable lets its peers' repair go on.
        # Each Pod's progress read once: a report arriving meanwhile must not make the two readings disagree.
        heard = [(p, progress_of(p)) for p in running]
        reporting = any(progress is not None for _, progress in heard)
        quiet = {
            _node_of(p)
            for p, progress in heard
            if _quiet(progress, now)
            or (reporting and _unheard_replica(p, progress))
            or silent_member.looks_quiet(member_of(p), now)
            or self._suspected(_node_of(p))
        } - {""}
        unreachable = self.reach.unreachable(quiet)
        leases = {name: self._get(Lease, name, NODE_LEASES) for name in quiet | set(self.avoided_now())}
        silent = {}
        for name in set(nodes) | set(leases):
            found = observing.silent_node(name, nodes.get(name), leases.get(name), now, name in unreachable)
            if found is not None:
                silent[name] = found
        with self._lock:
            back = [n for n in set(leases) - set(silent) if n in self.avoided and self._reports_again(n, leases[n])]
            for name in back:
                del self.avoided[name]
            new = sorted(set(silent) - set(self.avoided))
            for name in new:
                self._found_silent_at[name] = now
            self.avoided.update(silent)
            self._found_silent_at = {name: at for name, at in self._found_silent_at.items() if name in self.avoided}
        # A node that reports again is tried at the next pass: an operator that began to lead while it was gone never
        # reached it, and would not count it unreachable if it vanished again within RETRY_SECONDS.
        self.reach.try_again(back)
        for name in sorted(back):
            log.info("node %s reports again: Pods may be placed there", name)
        for name in new:
            beats = {p["metadata"]["name"]: _last_beat(progress_of(p)) for p in pods if _node_of(p) == name}
            unanswered = " and answers nothing at its kubelet's port" if silent[name].unreachable else ""
            log.info(
                "node %s stopped reporting (last heard %s)%s; its Pods last beat: %s",
                name,
                silent[name].since,
                unanswered,
                beats,
            )
        return nodes, silent

    def avoided_now(self) -> dict[str, SilentNode]:
        """The nodes kept off new Pods, as they stand (a copy: other jobs' passes change them)."""
        with self._lock:
            return dict(self.avoided)

    def _reports_again(self, name: str, lease: dict[str, Any] | None) -> bool:
        """Under the lock: whether avoided node ``name``'s kubelet has renewed its Lease since the node was found
        silent. Not merely a Lease that is not overdue yet: a node found silent by the probe vanished with a Lease
        seconds old, and a Pod placed there in those seconds would go nowhere."""
        renewed = observing.parse_time(((lease or {}).get("spec") or {}).get("renewTime"))
        found_at = self._found_silent_at.get(name, self.avoided[name].since)
        return renewed is not None and renewed > found_at

    def keep_off_silent(self, pod: dict[str, Any]) -> None:
        """Keep a Pod about to be created off every node known silent (``avoiding``), and let it prefer other
        nodes than those of replicas removed while running in the last ``SUSPECT_SECONDS`` (``preferring_away``).

        A Pod's spec cannot change once made: a node kept out of it stays out for the Pod's life, even once it
        reports again (seen: a spare whose only possible node had come back stayed Pending until the job ended).
        So a node is kept out only until its kubelet has renewed its Lease since it was found silent (read by
        ``for_pods`` in this pass), and the nodes kept out are named in the Pod's ``KEPT_OFF`` annotation (see
        ``kept_off_needlessly``)."""
        spec = pod["spec"]
        now = time.monotonic()
        with self._lock:
            avoided = sorted(self.avoided)
            recent = [n for n, at in self.suspects.items() if now - at < SUSPECT_SECONDS and n not in self.avoided]
        avoiding(spec, avoided)
        if avoided:
            pod["metadata"].setdefault("annotations", {})[KEPT_OFF] = ",".join(avoided)
        preferring_away(spec, recent)

    def suspect(self, pods: list[dict[str, Any]]) -> None:
        """Pods about to be removed: the nodes of those still running are suspects for a while. A member found
        silent is replaced within two seconds, long before its node is known silent (the node monitor's grace, or
        even a missed beat of the operator's probe); if its node vanished, its replacement must not go there."""
        now = time.monotonic()
        with self._lock:
            self.suspects = {node: at for node, at in self.suspects.items() if now - at < SUSPECT_SECONDS}
            for pod in pods:
                if _running(pod) and _node_of(pod):
                    self.suspects[_node_of(pod)] = now

    def _suspected(self, node: str) -> bool:
        at = self.suspects.get(node)
        return at is not None and time.monotonic() - at < SUSPECT_SECONDS

    def _get(self, kind: type[Any], name: str, namespace: str | None = None) -> dict[str, Any] | None:
        self.count("get")
        try:
            return as_dict(self.client.get(kind, name, namespace=namespace))
        except ApiError:
            return None  # deleted, or not readable: the Pod says what it says


def kept_off_needlessly(pod: dict[str, Any], avoided: dict[str, SilentNode]) -> bool:
    """A Pod the scheduler cannot place that torchjob kept off a node which reports again: only a new Pod can
    go there (for a spare or the rendezvous store, which nobody waits on yet, the planner makes one)."""
    kept_off = ((pod["metadata"].get("annotations") or {}).get(KEPT_OFF) or "").split(",")
    status = pod.get("status") or {}
    unschedulable = any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in status.get("conditions") or []
    )
    stale = {name for name in kept_off if name} - set(avoided)
    return bool(stale) and unschedulable and not (pod.get("spec") or {}).get("nodeName")


def avoiding(spec: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """A Pod spec that the scheduler keeps off ``nodes``: ``metadata.name NotIn nodes`` added to every required
    node selector term of its own (terms are ORed, so each must carry it), or as the only term."""
    if not nodes:
        return spec
    away = _not_on(nodes)
    required = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = required.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:
        term.setdefault("matchFields", []).extend(away)
    return spec


def preferring_away(spec: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """A Pod spec whose scheduling prefers nodes other than ``nodes`` (weight 100); never a requirement: where
    no other node fits, the Pod still goes there."""
    if not nodes:
        return spec
    away = {"matchFields": _not_on(nodes)}
    preferred = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    preferred.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
        {"weight": 100, "preference": away}
    )
    return spec


def _not_on(nodes: list[str]) -> list[dict[str, Any]]:
    """Node field requirements (ANDed) that keep a Pod off ``nodes``: a requirement on a node's field takes one
    value, so one per node."""
    return [{"key": "metadata.name", "operator": "NotIn", "values": [name]} for name in sorted(nodes)]


def never_finishing(pods: list[dict[str, Any]], silent: dict[str, SilentNode]) -> list[dict[str, Any]]:
    """Pods whose deletion was decided (by the planner or the platform) and whose grace period is over, on a node
    that stopped reporting: no kubelet will ever confirm they stopped, so they would stay Terminating, hiding
    behind the spare that took their place or holding a name. Only a forced delete removes them."""
    now = datetime.now(timezone.utc)
    found = []
    for pod in pods:
        deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
        due = observing.parse_time(deleting) if deleting else None
        if due is not None and due <= now and _node_of(pod) in silent:
            found.append(pod)
    return found


def _running(pod: dict[str, Any]) -> bool:
    """Running as far as the API server knows (Unknown: its kubelet lost touch, its containers may well run)."""
    return (pod.get("status") or {}).get("phase") in ("Running", "Unknown")


def _node_of(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _last_beat(progress: Progress | None) -> str:
    beat = progress.alive_at if progress is not None else None
    return beat.isoformat(timespec="seconds") if beat is not None else "never"


def _unheard_replica(pod: dict[str, Any], progress: Progress | None) -> bool:
    """A replica's Pod (not a spare, not the store: they never beat) from which no report has come."""
    return progress is None and observing.replica_of(pod) is not None


def _quiet(progress: Progress | None, now: datetime) -> bool:
    beat = progress.alive_at if progress is not None else None
    return beat is not None and (now - beat).total_seconds() > QUIET_SECONDS
