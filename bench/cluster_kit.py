"""What the cluster benchmarks share: torchjob's operator deployed in the cluster as users deploy it (its image from
this checkout, ``deploy/`` through kustomize: two replicas, leader election, the report endpoint behind its Service),
taking turns with an anchor's controller; a cluster of simulated nodes for the jobs' Pods; waiting on the cluster;
reading what a job's Pods logged and when, and what the operator did and cost.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import yaml
from tests.support import incluster, operator_pods

from bench.records import Run
from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete, toolchain
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


@contextlib.contextmanager
def simulated_nodes(name: str, directory: Path, count: int) -> Iterator[Cluster]:
    """A cluster whose one real node runs torchjob's operator (deployed, two replicas) and is then cordoned, and
    ``count`` kwok nodes that take the jobs' Pods (they run nothing: a Pod is Running as soon as it is bound)."""
    toolchain.build("build-kube.sh")
    cluster = create(ClusterConfig(name, (NodeConfig("kubelet"), NodeConfig("kwok", count))), directory / "rig")
    try:
        kwoks = [node.name for node in cluster.nodes if node.kind == "kwok"]
        real = next(node.name for node in cluster.nodes if node.kind == "kubelet")
        for node in kwoks:  # the operator goes to the real node: kwok nodes run nothing
            cluster.kubectl("cordon", node)
        DeployedOperator(cluster, directory / "operator")
        for node in kwoks:
            cluster.kubectl("uncordon", node)
        cluster.kubectl("cordon", real)  # and the jobs' Pods to the kwok nodes
        yield cluster
    finally:
        delete(name, directory / "rig")


def running_pods(cluster: Cluster, namespace: str) -> int:
    pods = cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
    # kwok completes Job-owned Pods as soon as they run: Succeeded counts as having got there.
    return sum(1 for p in pods if p.get("status", {}).get("phase") in ("Running", "Succeeded"))


def seconds_until_running(cluster: Cluster, namespace: str, manifests: list[dict[str, Any]], pods: int) -> float:
    """``manifests`` applied in a new ``namespace``: seconds until ``pods`` of its Pods are Running."""
    cluster.kubectl("create", "namespace", namespace)
    while cluster.kubectl("get", "-n", namespace, "serviceaccount", "default", check=False).returncode != 0:
        time.sleep(0.2)
    text = yaml.safe_dump_all(manifests)
    started = time.monotonic()
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=text, timeout=300)
    while (running := running_pods(cluster, namespace)) < pods:
        if time.monotonic() - started > 600:
            raise RuntimeError(f"{running} of {pods} pods in {namespace} were Running after 600 s")
        time.sleep(0.5)
    return time.monotonic() - started


def delete_namespace(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("delete", "namespace", namespace, "--wait=true", timeout=600)


def operator_requests(cluster: Cluster) -> dict[str, int]:
    """The leading operator's API requests so far, by verb (its /counters, read from inside its Pod)."""
    leading = operator_pods.leader(cluster)
    program = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8080/counters').read().decode())"
    found = cluster.kubectl("exec", "-n", "torchjob-system", leading, "--", "python3", "-c", program).stdout
    requests: dict[str, int] = json.loads(found)["requests"]
    return requests


def keep_requests_since(run: Run, cluster: Cluster, before: dict[str, int], per: str, count: int) -> None:
    """Keep the operator's API requests since ``before`` (its counters then), per ``per`` (a job, a replica) of
    ``count``: in all and by verb. Read 3 s late: the status writes that follow the last Pod starting."""
    time.sleep(3)
    after = operator_requests(cluster)
    by_verb = {verb: after.get(verb, 0) - before.get(verb, 0) for verb in after}
    run.keep(f"requests per {per}", sum(by_verb.values()) / count, "requests")
    for verb, made in sorted(by_verb.items()):
        run.keep(f"requests per {per}, {verb}", made / count, "requests")


def take_turns(
    run: Run,
    cluster: Cluster,
    trials: int,
    mine: list[dict[str, Any]],
    anchor: tuple[str, list[dict[str, Any]]],
    pods: int,
    per: tuple[str, int],
) -> None:
    """torchjob's operator (``mine`` applied) and an anchor (its name and manifests) take turns, the first side
    alternating, each trial in a new namespace deleted before the next: seconds until ``pods`` Pods are Running,
    and the operator's requests per ``per`` (a name and a count), then its peak RSS."""
    for number in range(trials):
        sides = ("torchjob", anchor[0]) if number % 2 == 0 else (anchor[0], "torchjob")
        for side in sides:
            namespace = f"{side.split()[0]}-{number}"
            if side == "torchjob":
                before = operator_requests(cluster)
                seconds = seconds_until_running(cluster, namespace, mine, pods)
                keep_requests_since(run, cluster, before, *per)
            else:
                seconds = seconds_until_running(cluster, namespace, anchor[1], pods)
            run.keep(f"{side} all running", seconds)
            print(f"  trial {number + 1}, {side}: {seconds:.1f} s", flush=True)
            delete_namespace(cluster, namespace)
    run.keep("operator peak RSS", operator_peak_rss_mb(cluster), "MB")


def operator_peak_rss_mb(cluster: Cluster) -> float:
    """The leading operator process's peak resident memory (VmHWM), in MB."""
    leading = operator_pods.leader(cluster)
    peak = 0
    for pid in cluster.container_pids("torchjob-system", leading, "operator"):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]))
    return peak / 1024
