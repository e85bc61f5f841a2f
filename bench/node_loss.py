"""A node vanishes mid-training (seed 004): the torchjob operator beside Kubeflow's training-operator v1.8.1, on
three real nodes, in the same run.

The README's MNIST job (``examples/mnist/job.yaml`` as shipped, checkpointing every 10 steps to a claim every
node mounts, its replicas spread over the nodes). Once it has checkpointed, the node of worker-1 is stopped as a
spot VM vanishes (``kuberig`` ``node stop``: its link goes silent first, then everything on it dies). Measured:
node stopped → the first step of a new group (the master's "resumed from the checkpoint" line, in a new Pod),
and what each operator was waiting for when the window closed. The ways take turns, trial by trial:

- ``cold``: torchjob's operator, the job as shipped (its Pods deleted and created again);
- ``warm``: the same with ``torchjob.io/warm-start: "true"`` (the survivors' Pods stay and their launchers fork
  the script again; only the lost replica's Pod is created anew);
- ``in place``: the in-place MNIST job (master, worker and a warm spare on a node each; the worker's node stopped
  in epoch 2) → the survivor's first step in the repaired group (``bench.in_place_node.vanished_trial``);
- ``kubeflow``: Kubeflow's operator, the job as shipped.

torchjob's operator runs in the cluster as users deploy it (two replicas, leader election), moved off the node
about to be lost before each trial (losing the operator's leader with the node is another scenario, which the
three-node tests cover); Kubeflow's runs beside the cluster, as kuberig runs it. ``python -m bench --only
node-loss``.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support import operator_pods
from tests.support.images import push_test_images
from tests.support.mnist_jobs import mnist_on_a_claim

from bench import in_place_node
from bench.cluster_kit import nodes_ready, stamp, start_operator, wait
from bench.records import Run
from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete
from kuberig.addons import kubeflow_operator
from kuberig.node import kubelet
from torchjob.core.times import parse_timestamp

RESUMED = "resumed from the checkpoint of step"
WARM_MARK = "torchjob: attempt 1 starts in this Pod, warm"
WAYS = ("cold", "warm", "in place", "kubeflow")
WINDOW = 120.0  # seconds a way has to get a new group stepping after the stop


def _pods(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    found = cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
    return {p["metadata"]["name"]: p for p in found}


def _resumed(cluster: Cluster, namespace: str, before: set[str]) -> bool:
    """The master of a new group resumed: in a new Pod, or after a warm restart in its own."""
    master = _pods(cluster, namespace).get("mnist-master-0")
    if master is None:
        return False
    log = cluster.kubectl("logs", "-n", namespace, "mnist-master-0", check=False).stdout
    if master["metadata"]["uid"] in before:
        log = log.split(WARM_MARK, 1)[1] if WARM_MARK in log else ""
    return RESUMED in log


def _state(cluster: Cluster, namespace: str) -> str:
    job = cluster.kubectl_json("get", "pytorchjob", "mnist", "-n", namespace)
    true = [c for c in job.get("status", {}).get("conditions") or [] if c.get("status") == "True"]
    return str(true[-1]["type"]) if true else ""


def _what_waits(cluster: Cluster, namespace: str, lost_node: str) -> str:
    """The Pods still on the lost node, as the API server shows them."""
    stuck = [
        f"{name} {'Terminating' if p['metadata'].get('deletionTimestamp') else p['status'].get('phase')}"
        for name, p in _pods(cluster, namespace).items()
        if p["spec"].get("nodeName") == lost_node
    ]
    return ", ".join(stuck) or "nothing on the lost node"


def _phases(cluster: Cluster, namespace: str, stopped: float) -> dict[str, float]:
    """Seconds after the stop: the first attempt ended (the loss declared), the new master's container started
    (both as the API keeps them, in whole seconds) and its first step resumed (the kubelet's log timestamp, on
    the host's clock)."""
    job = cluster.kubectl_json("get", "pytorchjob", "mnist", "-n", namespace)
    ended = parse_timestamp(job["status"]["attempts"][0]["endTime"]).timestamp()
    master = _pods(cluster, namespace)["mnist-master-0"]
    state = master["status"]["containerStatuses"][0]["state"]
    started = parse_timestamp((state.get("running") or state.get("terminated"))["startedAt"]).timestamp()
    log = cluster.kubectl("logs", "--timestamps", "-n", namespace, "mnist-master-0").stdout.splitlines()
    warm = [line for line in log if WARM_MARK in line]
    if warm:  # restarted warm in its own Pod: the new attempt started at the launcher's line
        started = stamp(warm[0])
        log = log[log.index(warm[0]) :]
    resumed = stamp(next(line for line in log if RESUMED in line))
    return {"declared": ended - stopped, "started": started - stopped, "resumed": resumed - stopped}


def _floor(cluster: Cluster, namespace: str) -> float | None:
    """The same job applied again on healthy nodes, with the finished job's checkpoint on the claim: apply →
    the master's first step resumed from it (Pods created, torch imported in three Pods, the checkpoint loaded)."""
    cluster.kubectl("delete", "pytorchjob", "mnist", "-n", namespace, "--wait=true", check=False, timeout=120)
    wait(lambda: not _pods(cluster, namespace), 120)
    started = time.monotonic()
    cluster.apply(mnist_on_a_claim(namespace, "--checkpoint-every", "10", spread=True))
    took = wait(lambda: _resumed(cluster, namespace, set()), 180)
    return None if took is None else time.monotonic() - started


def _job(namespace: str, warm: bool) -> dict[str, Any]:
    job = mnist_on_a_claim(namespace, "--checkpoint-every", "10", spread=True)
    if warm:
        job["metadata"]["annotations"] = {"torchjob.io/warm-start": "true"}
    return job


def trial(cluster: Cluster, namespace: str, run: Run, way: str) -> None:
    data = cluster.claim(namespace, "data")
    cluster.apply(_job(namespace, way == "warm"))
    if wait(lambda: any((data / "checkpoints").glob("*")), 300, poll=0.5) is None:
        raise RuntimeError(f"{namespace}: no checkpoint in 300 s")
    first = _pods(cluster, namespace)
    node = cluster.node(first["mnist-worker-1"]["spec"]["nodeName"])
    assert isinstance(node, kubelet.KubeletNode)
    if way != "kubeflow":
        operator_pods.move_operator_off(cluster, node.name)
    stopped, stopped_at = time.monotonic(), time.time()
    kubelet.stop(cluster.state, node)
    measured_floor = False
    try:
        took = wait(lambda: _resumed(cluster, namespace, {p["metadata"]["uid"] for p in first.values()}), WINDOW)
        run.keep(f"{way} first step", None if took is None else time.monotonic() - stopped)
        recorded = cluster.kubectl_json("get", "pytorchjob", "mnist", "-n", namespace).get("status", {}).get("attempts")
        if way != "kubeflow":  # torchjob's status: where the time went (None where there was no new attempt)
            phases = _phases(cluster, namespace, stopped_at) if took is not None and len(recorded or []) > 1 else {}
            for phase in ("declared", "started", "resumed"):
                run.keep(f"{way} {phase}", phases.get(phase))
            measured_floor = bool(phases)
        if way == "kubeflow":
            run.describe("kubeflow left on the lost node", _what_waits(cluster, namespace, node.name))
        if took is not None:
            wait(lambda: _state(cluster, namespace) in ("Succeeded", "Failed"), 300)
        run.keep(f"{way} succeeded", float(_state(cluster, namespace) == "Succeeded"), "")
    finally:
        kubelet.start(cluster.state, node)
        wait(lambda: nodes_ready(cluster), 180, poll=1)
        if way == "cold":  # every trial has a sample: None where the job did not get there
            succeeded = measured_floor and _state(cluster, namespace) == "Succeeded"
            run.keep("cold floor", _floor(cluster, namespace) if succeeded else None)
        cluster.kubectl("delete", "pytorchjob", "mnist", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--force", "--grace-period=0", check=False)


def record(run: Run, trials: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="bench-node-loss-"))
    name = f"loss-{os.getpid()}"
    cluster = create(ClusterConfig(name, (NodeConfig("kubelet", 3),)), directory / "rig")
    try:
        push_test_images(cluster)
        kubeflow_operator.push_init_image(cluster)
        for number in range(trials):
            for way in WAYS:
                print(f"  {way}, trial {number + 1} ...", flush=True)
                kind = "kubeflow" if way == "kubeflow" else "torchjob"
                operator = start_operator(cluster, kind, directory / f"{kind}-{number}-{way}")
                try:
                    namespace = cluster.namespace(f"loss-{way.replace(' ', '-')}-{number}")
                    if way == "in place":
                        repaired = in_place_node.vanished_trial(cluster, namespace)
                        run.keep("in place first step", None if repaired is None else repaired["first_step"])
                        run.keep("in place succeeded", float(repaired is not None), "")
                    else:
                        trial(cluster, namespace, run, way)
                finally:
                    operator.stop()
        run.keep("window", WINDOW)
    finally:
        delete(name, directory / "rig")
