"""What the cluster benchmarks share: torchjob's operator deployed in the cluster as users deploy it (its image from
this checkout, ``deploy/`` through kustomize: two replicas, leader election, the report endpoint behind its Service),
taking turns with an anchor's controller; waiting on the cluster; reading what a job's Pods logged and when.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from tests.support import incluster, operator_pods

from kuberig import Cluster
from kuberig.addons import kubeflow_operator


class Stoppable(Protocol):
    def stop(self) -> None: ...


class DeployedOperator:
    """torchjob's operator as ``tools/kube-rig deploy-operator`` leaves it; ``stop`` scales it to nothing."""

    def __init__(self, cluster: Cluster, directory: Path) -> None:
        self.cluster = cluster
        directory.mkdir(parents=True, exist_ok=True)
        incluster.deploy(cluster, directory)
        # Serving once a leader holds the Lease and the report Service routes to it (never to the standby).
        if wait(lambda: _serving(cluster), 180, poll=1) is None:
            raise RuntimeError(f"the deployed operator never served: {operator_pods.operator_pods(cluster)}")

    def stop(self) -> None:
        incluster.scale_down(self.cluster)


def _serving(cluster: Cluster) -> bool:
    try:
        leading = operator_pods.leader(cluster)
        return bool(leading) and operator_pods.report_endpoints(cluster) == [leading]
    except RuntimeError:  # no Lease yet: no replica has led
        return False


def start_operator(cluster: Cluster, name: str, directory: Path) -> Stoppable:
    """One PyTorchJob operator at a time, each with its own CRD: ``torchjob`` (deployed in the cluster) or
    ``kubeflow`` (Kubeflow's training-operator v1.8.1, which kuberig runs beside the cluster)."""
    if name == "kubeflow":
        return kubeflow_operator.start(cluster, directory)
    return DeployedOperator(cluster, directory)


def wait(check: Callable[[], Any], timeout: float, poll: float = 0.2) -> float | None:
    """Seconds until ``check()`` is true, or None when it was not within ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(poll)
    return None


def container_restarts(pods: list[dict[str, Any]]) -> int:
    """How often the kubelet restarted the containers of ``pods``, in place, all told."""
    return sum(s.get("restartCount", 0) for p in pods for s in p["status"].get("containerStatuses") or [])


def nodes_ready(cluster: Cluster) -> bool:
    """Every node Ready, with no taint the node lifecycle controller put on it."""
    for node in cluster.kubectl_json("get", "nodes")["items"]:
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        if not ready or any(k.startswith("node.kubernetes.io/") for k in taints):
            return False
    return True


def logged_steps(log: str, rank: int = 1) -> int:
    """``rank``'s last reported step in an MNIST example's log (its batch lines)."""
    lines = [line for line in log.splitlines() if f"Rank {rank}: epoch: " in line and "batch: " in line]
    if not lines:
        return 0
    epoch = int(lines[-1].split("epoch: ")[1].split("/")[0])
    batch, per_epoch = (int(x) for x in lines[-1].split("batch: ")[1].split(",")[0].split("/"))
    return (epoch - 1) * per_epoch + batch


def stamp(line: str) -> float:
    """The epoch seconds of a ``kubectl logs --timestamps`` line (RFC 3339 with nanoseconds)."""
    when = line.split(" ", 1)[0]
    whole, _, fraction = when.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float(f"0.{fraction or 0}")
