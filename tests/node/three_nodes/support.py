"""What the three-node tests read of the cluster and wait for: nodes Ready again, a job's end, a checkpoint on the
claim, a job carried on in place or restarted on the surviving nodes."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from kuberig import Cluster
from kuberig.node import kubelet
from tests.support.cluster_waits import wait_beside_a_spare, wait_for_condition
from tests.support.images import TEST_SCRIPTS
from tests.support.mnist_jobs import lost_and_survivor
from tests.support.operator_pods import operator_logs, ready
from tests.support.waits import wait_until


def spread_job(name: str, namespace: str, steps: int) -> dict[str, Any]:
    """Master + 2 Workers of the hang-test script, one Pod per node (required anti-affinity on the hostname)."""
    labels = {"training.kubeflow.org/job-name": name}
    anti = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
    container = {
        "name": "pytorch",
        "image": TEST_SCRIPTS,
        "command": ["python3", "hang_train.py", "--steps", str(steps)],
    }
    template = {
        "spec": {
            "containers": [container],
            "terminationGracePeriodSeconds": 2,
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [anti]}},
        }
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": template},
            },
        },
    }


def tainted_unreachable(cluster: Cluster, node: str) -> bool:
    taints = cluster.kubectl_json("get", "node", node)["spec"].get("taints") or []
    return any(t["key"] in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready") for t in taints)


def _kept_off(node: dict[str, Any]) -> bool:
    """Cordoned, or carrying a taint of the node controller's or the kubelet's own (unreachable, not ready,
    unschedulable, memory, disk or PID pressure, network unavailable): each passes, and each keeps Pods off it."""
    taints = node["spec"].get("taints") or []
    return bool(node["spec"].get("unschedulable")) or any(t["key"].startswith("node.kubernetes.io/") for t in taints)


# How long every node must stay Ready and untainted, with no earlier Pod going, before a test places its Pods: a
# node back from an earlier test was seen Ready at one look and tainted a few seconds later (CI: a spare that
# could not be placed until the job it was warm for had ended).
SETTLED = 5.0


# How long a Pod may stay terminating on a node that is back before it is removed by force. A Pod evicted by the
# node's unreachable taint while the node was stopped (an operator standby there, once a test outlasts the
# taint's 300 s on a slow machine) was seen left terminating by the rig's restarted kubelet for minutes: what the
# next test would wait for is not what any test here is about.
LEFT_TERMINATING = 60.0

# How long a node may read not Ready before it is helped back: its daemons that exited are started again (a real
# node's init system restarts a failed kubelet or containerd at once; the rig has none), and a node still down as
# long again with every daemon running is restarted whole. A node that did not come back from an earlier test's
# stop would otherwise leave every later test of the package waiting for it.
NOT_READY_REVIVE = 45.0


def all_nodes_ready(cluster: Cluster, timeout: float) -> None:
    """Every node Ready and untainted (a node stopped by an earlier test has come back), and no Pod of an earlier
    test still terminating: one left so on a node that is up is removed by force (LEFT_TERMINATING), and a node
    still down is helped back (NOT_READY_REVIVE). On the deadline, the failure says which node is down and why (its
    condition, its daemons, its kubelet's last lines) and which Pods are going, from where."""
    deadline = time.monotonic() + timeout
    first_seen: dict[str, float] = {}
    helped: dict[str, int] = {}
    settled_since: float | None = None
    while True:
        nodes = {n["metadata"]["name"]: n for n in cluster.kubectl_json("get", "nodes")["items"]}
        down = {name for name, n in nodes.items() if not ready(n["status"]["conditions"]) or _kept_off(n)}
        pods = cluster.kubectl_json("get", "pods", "-A")["items"]
        leaving = [p for p in pods if p["metadata"].get("deletionTimestamp")]
        now = time.monotonic()
        if not down and not leaving:  # an earlier test's Pods, still going, skew the placement
            settled_since = now if settled_since is None else settled_since
            if now - settled_since >= SETTLED:
                return
            time.sleep(1)
            continue
        settled_since = None
        for name in down:
            if now - first_seen.setdefault(f"node/{name}", now) > NOT_READY_REVIVE:
                first_seen[f"node/{name}"] = now  # what was started gets the same time again
                helped[name] = helped.get(name, 0) + 1
                _bring_back(cluster, nodes[name], whole=helped[name] > 1)
        for pod in leaving:
            meta, on = pod["metadata"], pod["spec"].get("nodeName")
            if on in down:
                continue  # a node that is down never finishes it: its coming back does
            if now - first_seen.setdefault(f"pod/{meta['namespace']}/{meta['name']}", now) > LEFT_TERMINATING:
                print(f"{meta['name']} terminating {LEFT_TERMINATING:.0f}s on {on}, which is up: removed by force")
                deleted = cluster.kubectl(
                    "delete", "pod", meta["name"], "-n", meta["namespace"], "--force", "--grace-period=0", check=False
                )
                if deleted.returncode:
                    print(f"  the removal failed: {deleted.stderr.strip()}")
        if now >= deadline:
            raise AssertionError(_why_not_ready(cluster, nodes, down, leaving))
        time.sleep(1)


def _bring_back(cluster: Cluster, seen: dict[str, Any], whole: bool) -> None:
    name = seen["metadata"]["name"]
    node = cluster.node(name)
    if not isinstance(node, kubelet.KubeletNode):
        return
    print(_why_not_ready(cluster, {name: seen}, {name}, []))
    if started := kubelet.revive(cluster.state, node):
        print(f"{name} not Ready for {NOT_READY_REVIVE:.0f}s, its {', '.join(started)} had exited: started again")
    elif whole:
        print(f"{name} not Ready for {2 * NOT_READY_REVIVE:.0f}s with its daemons running: restarted whole")
        kubelet.stop(cluster.state, node)
        kubelet.start(cluster.state, node)


def _why_not_ready(cluster: Cluster, nodes: dict[str, Any], down: set[str], leaving: list[dict[str, Any]]) -> str:
    lines = ["not every node came back Ready, or Pods still going"]
    for name in sorted(down):
        condition = next((c for c in nodes[name]["status"]["conditions"] if c["type"] == "Ready"), {})
        taints = [t["key"] for t in nodes[name]["spec"].get("taints") or []]
        lines.append(
            f"node {name}: Ready={condition.get('status')} ({condition.get('reason')}: "
            f"{condition.get('message')}), taints {taints}"
        )
        node = cluster.node(name)
        if isinstance(node, kubelet.KubeletNode):
            lines.append(
                f"  daemons exited: {kubelet.exited(cluster.state, node) or 'none'}; its kubelet's last lines:"
            )
            lines += [f"    {line}" for line in kubelet.log_tail(cluster.state, node, "kubelet")]
    for pod in leaving:
        meta = pod["metadata"]
        lines.append(
            f"pod {meta['namespace']}/{meta['name']} on {pod['spec'].get('nodeName')}: deleted at "
            f"{meta['deletionTimestamp']}, finalizers {meta.get('finalizers') or []}"
        )
    return "\n".join(lines)


def succeeded(cluster: Cluster, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    """The job once it ended, which must be a success."""
    job: dict[str, Any] = wait_for_condition(cluster, namespace, name, {"Succeeded", "Failed"}, timeout=timeout)
    conditions = {c["type"]: c for c in job["status"]["conditions"]}
    assert "Failed" not in conditions, conditions["Failed"]["message"]
    return job


def restarted_on_the_survivors(
    cluster: Cluster, namespace: str, first: dict[str, Any], lost_node: str
) -> list[dict[str, Any]]:
    """The MNIST job's Pods after a group restart away from ``lost_node``: the same names (no Pod twice), none on
    that node, and the Master resumed from the checkpoint to a good accuracy."""
    pods: list[dict[str, Any]] = cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
    assert {p["metadata"]["name"] for p in pods} == set(first)  # no Pod twice
    assert lost_node not in {p["spec"]["nodeName"] for p in pods}  # the new group runs on the survivors
    log = cluster.kubectl("logs", "-n", namespace, "mnist-master-0").stdout
    assert "resumed from the checkpoint of step" in log, log[-2000:]
    assert float(log.split("test accuracy=")[1].split()[0]) >= 0.90
    return pods


def fail_unless_in_place(cluster: Cluster, namespace: str, status: dict[str, Any], repairs: int) -> None:
    """The in-place job carried on in its first attempt with ``repairs`` repairs; else fail with its events and
    the operator's log."""
    if (status["attempt"], status["restartCount"], status["repairs"]) != (0, 0, repairs):
        events = cluster.kubectl("get", "events", "-n", namespace, check=False).stdout
        operator = operator_logs(cluster)
        pytest.fail(f"not carried on in place: {status.get('attempts')}\n{events[-4000:]}\n{operator[-6000:]}")


def wait_until_gone_from(
    cluster: Cluster, namespace: str, node: str, keeping: frozenset[str] | set[str] = frozenset()
) -> None:
    """Until no Pod of the namespace but ``keeping`` is on ``node`` (removed by force: its kubelet is gone)."""

    def on_the_node() -> set[str]:
        pods = cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
        return {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == node} - set(keeping)

    wait_until(lambda: not on_the_node(), 120, f"no Pod of {namespace} left on {node}", every=1, detail=on_the_node)


def wait_for_epoch_2_beside_a_spare(cluster: Cluster, namespace: str, name: str) -> None:
    """Until the in-place MNIST job's worker-0 trains its second epoch and its warm spare is reported ready."""
    wait_beside_a_spare(cluster, namespace, name, f"{name}-worker-0", "epoch: 2/")


@dataclass(frozen=True)
class Spread:
    """An in-place job's Pods, a replica per node (``mnist_jobs.one_per_node``), and the node to stop."""

    before: dict[str, dict[str, Any]]  # the job's Pods, by name, before the node goes
    lost: str  # the replica whose node goes ("worker-0", or "master-0" where the store shares the worker's node)
    survivor: str
    node: kubelet.KubeletNode

    def carried_on(self, cluster: Cluster, namespace: str, pod: str) -> bool:
        """Whether ``pod`` is the Pod it was before: never deleted, never recreated."""
        now = cluster.kubectl_json("get", "pod", pod, "-n", namespace)
        return bool(now["metadata"]["uid"] == self.before[pod]["metadata"]["uid"])


def spread(cluster: Cluster, namespace: str, name: str) -> Spread:
    """The job ``name``'s Pods, its master, worker and spare each on a node of its own, and the replica to lose."""
    before = {p["metadata"]["name"]: p for p in cluster.kubectl_json("get", "pods", "-n", namespace)["items"]}
    where = {pod: p["spec"]["nodeName"] for pod, p in before.items()}
    assert len({where[f"{name}-{r}"] for r in ("master-0", "worker-0", "spare-0-0")}) == 3, where  # a node each
    lost, survivor = lost_and_survivor(name, where)
    node = cluster.node(where[f"{name}-{lost}"])
    assert isinstance(node, kubelet.KubeletNode)
    return Spread(before, lost, survivor, node)
