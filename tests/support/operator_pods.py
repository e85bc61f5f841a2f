"""The torchjob operator's Pods in a cluster where it is deployed as users deploy it (``tests/support/incluster.py``):
which one leads, where each runs, and moving them (off a node about to be lost, or the leader onto it) before a
scenario starts, for the multi-node tests and the cluster benchmarks alike."""

from __future__ import annotations

import time
from typing import Any

from kuberig import Cluster

NAMESPACE = "torchjob-system"


def leader(cluster: Cluster) -> str:
    """The Pod that holds the operator's lease (its identity is the Pod's name, then a suffix of its own)."""
    lease = cluster.kubectl_json("get", "lease", "torchjob-operator", "-n", NAMESPACE)
    return str(lease["spec"].get("holderIdentity") or "").rsplit("_", 1)[0]


def move_operator_off(cluster: Cluster, node: str) -> None:
    """No operator Pod on ``node`` any more (a leader there gives up its Lease on its clean stop, and the standby
    takes over). For a test that stops a node and means to lose a replica alone, not the leader."""
    _replace_operator_pods(cluster, {pod for pod, where in operator_pods(cluster).items() if where == node}, node)


def lead_from(cluster: Cluster, node: str) -> None:
    """The operator's leader on ``node``, its standby on another: for a test that loses the leader together with
    a replica on ``node``, and means the standby to take over (not to lose both operators at once)."""
    pods, leading = operator_pods(cluster), leader(cluster)
    if pods[leading] != node:
        # A standby on the node first (made again there: every other node cordoned meanwhile), then the leader
        # elsewhere stops cleanly, so that standby takes the Lease, and is made again off the node.
        _replace_operator_pods(cluster, set(pods) - {leading}, *(n.name for n in cluster.nodes if n.name != node))
        standby = next(pod for pod, where in operator_pods(cluster).items() if where == node)
        _replace_operator_pods(cluster, {leading}, node, leading_first=standby)
        leading = standby
    beside = {pod for pod, where in operator_pods(cluster).items() if where == node and pod != leading}
    _replace_operator_pods(cluster, beside, node)
    pods = operator_pods(cluster)
    assert pods[leader(cluster)] == node and list(pods.values()).count(node) == 1, pods


def _replace_operator_pods(
    cluster: Cluster, pods: set[str], *kept_off: str, leading_first: str | None = None, timeout: float = 180
) -> None:
    """Delete the operator's ``pods`` while the nodes ``kept_off`` are cordoned, and wait until the Deployment
    has made them again (elsewhere), both are Ready (a standby is: ready to take over) and reports reach a
    leader. ``leading_first``: the standby that must take the Lease, before any Pod made again could (every
    node stays cordoned until it has)."""
    if not pods:
        return
    staying = set(operator_pods(cluster)) - pods
    cordoned = [n.name for n in cluster.nodes] if leading_first else list(kept_off)
    for node in cordoned:
        cluster.kubectl("cordon", node)
    try:
        for pod in sorted(pods):
            cluster.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--wait=true", timeout=120)
        deadline = time.monotonic() + timeout
        while leading_first is not None and leader(cluster) != leading_first:
            assert time.monotonic() < deadline, f"{leading_first} did not take the Lease"
            time.sleep(0.5)
        for node in set(cordoned) - set(kept_off):
            cluster.kubectl("uncordon", node)
        while True:
            found, leading = _operator_pod_items(cluster), leader(cluster)
            now = _placement(found)
            made = [where for pod, where in now.items() if pod not in staying]
            placed = len(now) == 2 and not pods & set(now) and not set(kept_off) & set(made)
            all_ready = all(ready(p["status"].get("conditions")) for p in found)
            if placed and all_ready and leading in now and report_endpoints(cluster) == [leading]:
                return
            assert time.monotonic() < deadline, f"the operator's Pods were not made again: {now}, leader {leading}"
            time.sleep(1)
    finally:
        for node in cordoned:
            cluster.kubectl("uncordon", node, check=False)


def ready(conditions: list[dict[str, Any]] | None) -> bool:
    """A Pod's or a node's conditions say Ready."""
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions or [])


def report_endpoints(cluster: Cluster) -> list[str]:
    """The Pods the operator's report Service routes to."""
    found = cluster.kubectl_json("get", "endpoints", "torchjob-operator", "-n", NAMESPACE)
    addresses = [a for subset in found.get("subsets") or [] for a in subset.get("addresses") or []]
    return sorted(a["targetRef"]["name"] for a in addresses)


def operator_pods(cluster: Cluster) -> dict[str, str]:
    """The operator's Pods: name → node."""
    return _placement(_operator_pod_items(cluster))


def _placement(pods: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}


def _operator_pod_items(cluster: Cluster) -> list[dict[str, Any]]:
    found = cluster.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=torchjob-operator")
    return list(found["items"])


def operator_logs(cluster: Cluster) -> str:
    """Each operator Pod's recent log, under its name and node (what a failed test shows)."""
    logs = ""
    for pod, node in operator_pods(cluster).items():
        got = cluster.kubectl("logs", "-n", NAMESPACE, pod, "--tail=600", check=False)
        logs += f"\n==== {pod} on {node}: {got.stderr.strip()}\n{got.stdout}"
    return logs
