"""In-place repair on the real node: one trial of examples/mnist/job-inplace.yaml (1 Master + 2 Workers, one
warm spare Pod) with worker-1's training process SIGKILLed from the host in epoch 2.

Measured against the moment of the kill, from the Master Pod's own log with the kubelet's timestamps (the
node and this process share one clock): when rank 0 had re-formed the group with the spare, and when its
first step after that completed (the job logs every step). Run by ``bench/real_node.py`` beside the
operators' group restarts.

``python -m bench.inplace_node [TRIALS]`` runs the frozen case on its own (#31): worker-1's process SIGSTOPped,
nothing fails or closes, and the operator must find the one member the others wait for from the announcements the
Pods send it (one every 0.15 s, each also reading the membership; a silence of 1.5 s, or twice the longest gap the
member was heard with, confirms it). ``--node-lost`` runs it on three nodes with master, worker and spare a node
each, and stops the worker's node instead: a vanished node, whose silence ends no collective. ``--evicted``
alternates, on one node, a SIGKILL (the anchor) with an eviction through the Eviction API (what `kubectl drain`
does to a Pod): the evicted member hands its place to the spare and the group re-forms at a step boundary. Both
report the stall: from the survivor's last step before the change to its first step after it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from tests.support.mnist_jobs import inplace_one_per_node, lost_and_survivor

from kuberig import Cluster

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mnist" / "job-inplace.yaml"
JOB = "mnist-inplace"


def _status(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found = cluster.kubectl_json("get", "pytorchjob", JOB, "-n", namespace)
    return dict(found.get("status") or {})


def _wait(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.25)
    return False


def _stamp(line: str) -> float:
    """The epoch seconds of a ``kubectl logs --timestamps`` line (RFC 3339 with nanoseconds)."""
    stamp = line.split(" ", 1)[0]
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float(f"0.{fraction or 0}")


def _repair_times(cluster: Cluster, namespace: str, replica: str, since: float) -> dict[str, float]:
    """From a surviving member's log: when it re-formed the group and when its first step after that completed,
    and (where it had to) when its watching thread saw the repair published and left its step, all after
    ``since``."""
    log = cluster.kubectl("logs", "--timestamps", "-n", namespace, f"{JOB}-{replica}").stdout.splitlines()
    repaired = next(i for i, line in enumerate(log) if "group repaired in place" in line or "re-formed in" in line)
    first = next(line for line in log[repaired + 1 :] if "batch: " in line)
    last = next(line for line in reversed(log[:repaired]) if "batch: " in line)
    found = {
        "reformed": _stamp(log[repaired]) - since,
        "first_step": _stamp(first) - since,
        "stall": _stamp(first) - _stamp(last),
    }
    left = next((line for line in log[:repaired] if "left the step" in line), None)
    return found if left is None else {"left": _stamp(left) - since, **found}


def trial(
    cluster: Cluster, namespace: str, sent: signal.Signals = signal.SIGKILL, trainjob: bool = False
) -> dict[str, float] | None:
    """{"reformed": s, "first_step": s} after the kill (``sent``: SIGSTOP freezes the process instead), or None
    when the job was not repaired in place. ``trainjob``: the same job as a TrainJob of Kubeflow's
    ``torch-distributed`` runtime (three nodes, the spare annotation on the TrainJob), which torchjob runs as
    this PyTorchJob."""
    job = _example_job(namespace)
    cluster.apply(_as_trainjob(job) if trainjob else job)
    try:
        if not _in_epoch_2_beside_a_spare(cluster, namespace, "worker-1"):
            return None
        # kubectl: found before the clock starts. A TrainJob's trainer container keeps Trainer's name.
        pids = cluster.container_pids(namespace, f"{JOB}-worker-1", "node" if trainjob else "pytorch")
        killed_at = time.time()
        for pid in pids:
            os.kill(pid, sent)
        return _repair_times(cluster, namespace, "master-0", killed_at) if _repaired_once(cluster, namespace) else None
    finally:
        _delete_job(cluster, namespace, "trainjob" if trainjob else "pytorchjob")


def _example_job(namespace: str) -> dict[str, Any]:
    """examples/mnist/job-inplace.yaml in ``namespace``, 3 epochs, every step logged (the times come from the log)."""
    job: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["namespace"] = namespace
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["args"] = ["--epochs", "3", "--log-interval", "1"]
    return job


def evicted_trial(cluster: Cluster, namespace: str) -> dict[str, float] | None:
    """The same job, worker-1's Pod evicted through the Eviction API in epoch 2: times after the eviction from
    the master's log; None when the job was not handed over (or repaired) in place once."""
    job = _example_job(namespace)
    cluster.apply(job)
    try:
        if not _in_epoch_2_beside_a_spare(cluster, namespace, "worker-1"):
            return None
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": f"{JOB}-worker-1"}}
        evicted_at = time.time()
        path = f"/api/v1/namespaces/{namespace}/pods/{JOB}-worker-1/eviction"
        cluster.kubectl("create", "--raw", path, "-f", "-", input=json.dumps(eviction))
        return _repair_times(cluster, namespace, "master-0", evicted_at) if _repaired_once(cluster, namespace) else None
    finally:
        _delete_job(cluster, namespace)


def _as_trainjob(job: dict[str, Any]) -> dict[str, Any]:
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    trainer = {key: container[key] for key in ("image", "command", "args")}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": job["metadata"],
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {**trainer, "numNodes": 3}},
    }


def _in_epoch_2_beside_a_spare(cluster: Cluster, namespace: str, replica: str) -> bool:
    """Wait until ``replica`` trains in epoch 2 and a spare is warm (False: not within 300 s)."""

    def ready() -> bool:
        log = cluster.kubectl("logs", "-n", namespace, f"{JOB}-{replica}", check=False).stdout
        return "epoch: 2/" in log and _status(cluster, namespace).get("sparesReady") == 1

    return _wait(ready, 300)


def _repaired_once(cluster: Cluster, namespace: str) -> bool:
    """Wait for the job to end; whether it was repaired in place exactly once."""
    finished = _wait(lambda: "completionTime" in _status(cluster, namespace), 400)
    return finished and _status(cluster, namespace).get("repairs") == 1


def _delete_job(cluster: Cluster, namespace: str, kind: str = "pytorchjob") -> None:
    cluster.kubectl("delete", kind, JOB, "-n", namespace, "--ignore-not-found", "--wait=true")
    _wait(lambda: not cluster.kubectl_json("get", "pods", "-n", namespace)["items"], 120)


def vanished_trial(cluster: Cluster, namespace: str) -> dict[str, float] | None:
    """The in-place job with master, worker and spare on a node each; the worker's node stopped as a spot VM
    vanishes (its link silent first, then everything on it dies). Times after the stop, from the survivor's log;
    None when the job was not repaired in place."""
    from bench.node_loss import _nodes_ready
    from kuberig.node import kubelet

    cluster.apply(inplace_one_per_node(namespace, "--log-interval", "1"))
    try:
        if not _in_epoch_2_beside_a_spare(cluster, namespace, "worker-0"):
            return None
        where = {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
        }
        lost, survivor = lost_and_survivor(JOB, where)
        node = cluster.node(where[f"{JOB}-{lost}"])
        assert isinstance(node, kubelet.KubeletNode)
        stopped_at = time.time()
        kubelet.stop(cluster.state, node)
        try:
            return (
                _repair_times(cluster, namespace, survivor, stopped_at) if _repaired_once(cluster, namespace) else None
            )
        finally:
            kubelet.start(cluster.state, node)
            _wait(lambda: _nodes_ready(cluster), 180)
    finally:
        _delete_job(cluster, namespace)


def run(trials: int, mode: str) -> dict[str, list[dict[str, float] | None]]:
    """Trials on a fresh rig with the torchjob operator, by kind: SIGSTOP on one node (``frozen``), a vanished
    node of three (``node-lost``), or SIGKILL and eviction alternating on one node (``evicted``)."""
    from tests.support.images import push_test_images

    from bench.real_node import _start_operator
    from kuberig import ClusterConfig, NodeConfig, create, delete

    directory = Path(tempfile.mkdtemp(prefix="bench-inplace-node-"))
    name = f"bench-{os.getpid()}"
    nodes = NodeConfig("kubelet", 3 if mode == "node-lost" else 1)
    cluster = create(ClusterConfig(name, (nodes,)), directory / "rig")
    Trial = Callable[[str], dict[str, float] | None]
    kinds: dict[str, Trial] = {}
    if mode == "frozen":
        kinds["SIGSTOP in a Pod"] = lambda ns: trial(cluster, ns, signal.SIGSTOP)
    elif mode == "node-lost":
        kinds["node of a member stopped"] = lambda ns: vanished_trial(cluster, ns)
    else:
        kinds["SIGKILL in a Pod (anchor)"] = lambda ns: trial(cluster, ns, signal.SIGKILL)
        kinds["Pod evicted (Eviction API)"] = lambda ns: evicted_trial(cluster, ns)
    try:
        push_test_images(cluster)
        namespace = cluster.namespace(mode)
        operator = _start_operator(cluster, "torchjob", directory / "operator")
        try:
            found: dict[str, list[dict[str, float] | None]] = {kind: [] for kind in kinds}
            for number in range(trials):
                for kind, one in kinds.items():
                    found[kind].append(one(namespace))
                    print(f"  trial {number + 1}, {kind}: {found[kind][-1]}", flush=True)
            return found
        finally:
            operator.stop()
    finally:
        delete(name, directory / "rig")


if __name__ == "__main__":
    mode = next((a[2:] for a in sys.argv[1:] if a in ("--node-lost", "--evicted")), "frozen")
    numbers = [a for a in sys.argv[1:] if not a.startswith("--")]
    for what, results in run(int(numbers[0]) if numbers else 3, mode).items():
        repaired = [r for r in results if r is not None]
        if not repaired:
            print(f"{what}: never repaired in place")
            continue
        firsts = sorted(r["first_step"] for r in repaired)
        stalls = sorted(r["stall"] for r in repaired)
        print(
            f"{what} -> first step of the re-formed group: median {firsts[len(firsts) // 2]:.2f} s; the survivor's "
            f"stall median {stalls[len(stalls) // 2]:.2f} s ({len(repaired)} of {len(results)} in place; "
            f"first steps {', '.join(f'{v:.2f}' for v in firsts)}; stalls {', '.join(f'{v:.2f}' for v in stalls)})"
        )
