"""In-place repair on real nodes, one trial at a time, for ``bench.real_node`` and ``bench.node_loss``: the in-place
MNIST job (examples/mnist/job-inplace.yaml: 1 Master + 2 Workers, one warm spare Pod) with worker-1 lost in epoch 2,
by SIGKILL or SIGSTOP of its training process from the host (``trial``), by an eviction through the Eviction API,
as `kubectl drain` does (``evicted_trial``: the member hands its place to the spare at a step boundary), or with its
node stopped as a spot VM vanishes (``vanished_trial``: master, worker and spare on a node each).

Measured against the moment of the loss, from a survivor's own log with the kubelet's timestamps (the nodes and
this process share one clock): when it had re-formed the group with the spare, when its first step after that
completed (the job logs every step), and its stall: from its last step before the loss to its first after it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import yaml
from tests.support.mnist_jobs import in_place_one_per_node, lost_and_survivor

from bench.cluster_kit import nodes_ready, stamp, wait
from kuberig import Cluster
from kuberig.node import kubelet

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mnist" / "job-inplace.yaml"
JOB = "mnist-inplace"


def _status(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found = cluster.kubectl_json("get", "pytorchjob", JOB, "-n", namespace)
    return dict(found.get("status") or {})


def _repair_times(cluster: Cluster, namespace: str, replica: str, since: float) -> dict[str, float]:
    """From a surviving member's log: when it re-formed the group and when its first step after that completed,
    and (where it had to) when its watching thread saw the repair published and left its step, all after
    ``since``."""
    log = cluster.kubectl("logs", "--timestamps", "-n", namespace, f"{JOB}-{replica}").stdout.splitlines()
    repaired = next(i for i, line in enumerate(log) if "group repaired in place" in line or "re-formed in" in line)
    first = next(line for line in log[repaired + 1 :] if "batch: " in line)
    last = next(line for line in reversed(log[:repaired]) if "batch: " in line)
    found = {
        "reformed": stamp(log[repaired]) - since,
        "first_step": stamp(first) - since,
        "stall": stamp(first) - stamp(last),
    }
    left = next((line for line in log[:repaired] if "left the step" in line), None)
    return found if left is None else {"left": stamp(left) - since, **found}


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

    return wait(ready, 300, poll=0.25) is not None


def _repaired_once(cluster: Cluster, namespace: str) -> bool:
    """Wait for the job to end; whether it was repaired in place exactly once."""
    finished = wait(lambda: "completionTime" in _status(cluster, namespace), 400, poll=0.25) is not None
    return finished and _status(cluster, namespace).get("repairs") == 1


def _delete_job(cluster: Cluster, namespace: str, kind: str = "pytorchjob") -> None:
    cluster.kubectl("delete", kind, JOB, "-n", namespace, "--ignore-not-found", "--wait=true")
    wait(lambda: not cluster.kubectl_json("get", "pods", "-n", namespace)["items"], 120)


def vanished_trial(cluster: Cluster, namespace: str) -> dict[str, float] | None:
    """The in-place job with master, worker and spare on a node each; the worker's node stopped as a spot VM
    vanishes (its link silent first, then everything on it dies). Times after the stop, from the survivor's log;
    None when the job was not repaired in place."""
    cluster.apply(in_place_one_per_node(namespace, "--log-interval", "1"))
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
            wait(lambda: nodes_ready(cluster), 180)
    finally:
        _delete_job(cluster, namespace)
