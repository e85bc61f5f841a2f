"""A node vanishes mid-training (seed 004): the torchjob operator beside Kubeflow's training-operator v1.8.1, on
three real nodes, in the same run.

The README's MNIST job (``examples/mnist/job.yaml`` as shipped, checkpointing every 10 steps to a claim every
node mounts, its replicas spread over the nodes). Once it has checkpointed, the node of worker-1 is stopped as a
spot VM vanishes (``kuberig`` ``node stop``: its link goes silent first, then everything on it dies). Measured:
node stopped → the first step of a new group (the master's "resumed from the checkpoint" line, in a new Pod),
and what each operator was waiting for when the window closed. The operators take turns, alternating trials;
torchjob runs the job twice per trial: as shipped, and with ``torchjob.io/warm-start: "true"`` (``torchjob-warm``:
the survivors' Pods stay and their launchers fork the script again; only the lost replica's Pod is created anew).
``torchjob-inplace`` runs the in-place MNIST job instead (master, worker and a warm spare on a node each; the
worker's node stopped in epoch 2): node stopped → the survivor's first step in the repaired group
(``bench.inplace_node.vanished_trial``).

    .venv/bin/python -m bench.node_loss [TRIALS] [WINDOW_SECONDS] [OPERATORS]

OPERATORS, comma-separated, picks some of ``torchjob``, ``torchjob-warm`` and ``kubeflow`` (all by default).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from tests.support.images import push_test_images
from tests.support.mnist_jobs import mnist_on_a_claim

from bench import inplace_node
from bench.real_node import _start_operator, _wait
from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete
from kuberig.addons import kubeflow_operator
from kuberig.node import kubelet
from torchjob.core.times import parse_timestamp

RESUMED = "resumed from the checkpoint of step"
WARM_MARK = "torchjob: attempt 1 starts in this Pod, warm"
CONTROLLERS = ("torchjob", "torchjob-warm", "torchjob-inplace", "kubeflow")


@dataclass
class NodeLossRun:
    recovery: list[float | None] = field(default_factory=list)  # node stopped → new group's first step; None: never
    succeeded: list[bool] = field(default_factory=list)
    waiting_on: list[str] = field(default_factory=list)  # what the job waited for when the window closed
    outcomes: list[str] = field(default_factory=list)  # the first attempt's outcome, where the operator records one
    # torchjob only: where the time went (seconds after the stop), and the cold floor: the same job applied again
    # on healthy nodes → its first step resumed from the checkpoint
    phases: list[dict[str, float]] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)


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


def _nodes_ready(cluster: Cluster) -> bool:
    for node in cluster.kubectl_json("get", "nodes")["items"]:
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        if not ready or any(k.startswith("node.kubernetes.io/") for k in taints):
            return False
    return True


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
        started = inplace_node._stamp(warm[0])
        log = log[log.index(warm[0]) :]
    resumed = inplace_node._stamp(next(line for line in log if RESUMED in line))
    return {"declared": ended - stopped, "started": started - stopped, "resumed": resumed - stopped}


def _floor(cluster: Cluster, namespace: str) -> float | None:
    """The same job applied again on healthy nodes, with the finished job's checkpoint on the claim: apply →
    the master's first step resumed from it (Pods created, torch imported in three Pods, the checkpoint loaded)."""
    cluster.kubectl("delete", "pytorchjob", "mnist", "-n", namespace, "--wait=true", check=False, timeout=120)
    _wait(lambda: not _pods(cluster, namespace), 120)
    started = time.monotonic()
    cluster.apply(mnist_on_a_claim(namespace, "--checkpoint-every", "10", spread=True))
    took = _wait(lambda: _resumed(cluster, namespace, set()), 180)
    return None if took is None else time.monotonic() - started


def _job(namespace: str, warm: bool) -> dict[str, Any]:
    job = mnist_on_a_claim(namespace, "--checkpoint-every", "10", spread=True)
    if warm:
        job["metadata"]["annotations"] = {"torchjob.io/warm-start": "true"}
    return job


def trial(cluster: Cluster, namespace: str, run: NodeLossRun, window: float, warm: bool = False) -> None:
    data = cluster.claim(namespace, "data")
    cluster.apply(_job(namespace, warm))
    if _wait(lambda: any((data / "checkpoints").glob("*")), 300, poll=0.5) is None:
        raise RuntimeError(f"{namespace}: no checkpoint in 300 s")
    first = _pods(cluster, namespace)
    node = cluster.node(first["mnist-worker-1"]["spec"]["nodeName"])
    assert isinstance(node, kubelet.KubeletNode)
    stopped, stopped_at = time.monotonic(), time.time()
    kubelet.stop(cluster.state, node)
    measured_floor = False
    try:
        took = _wait(lambda: _resumed(cluster, namespace, {p["metadata"]["uid"] for p in first.values()}), window)
        run.recovery.append(None if took is None else time.monotonic() - stopped)
        recorded = cluster.kubectl_json("get", "pytorchjob", "mnist", "-n", namespace).get("status", {}).get("attempts")
        if took is not None and len(recorded or []) > 1:  # torchjob's status: where the time went
            run.phases.append(_phases(cluster, namespace, stopped_at))
            measured_floor = True
        run.waiting_on.append(_what_waits(cluster, namespace, node.name))
        if took is not None:
            _wait(lambda: _state(cluster, namespace) in ("Succeeded", "Failed"), 300)
        run.succeeded.append(_state(cluster, namespace) == "Succeeded")
        job = cluster.kubectl_json("get", "pytorchjob", "mnist", "-n", namespace)
        attempts = job.get("status", {}).get("attempts") or [{}]
        run.outcomes.append(f"{attempts[0].get('outcome', '')} (restartCount {job['status'].get('restartCount', 0)})")
    finally:
        kubelet.start(cluster.state, node)
        _wait(lambda: _nodes_ready(cluster), 180, poll=1)
        if measured_floor and run.succeeded[-1:] == [True] and not warm:
            floor = _floor(cluster, namespace)
            if floor is not None:
                run.floor.append(floor)
        cluster.kubectl("delete", "pytorchjob", "mnist", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--force", "--grace-period=0", check=False)


def measure(trials: int = 1, window: float = 180, operators: tuple[str, ...] = CONTROLLERS) -> dict[str, NodeLossRun]:
    directory = Path(tempfile.mkdtemp(prefix="bench-node-loss-"))
    name = f"loss-{os.getpid()}"
    cluster = create(ClusterConfig(name, (NodeConfig("kubelet", 3),)), directory / "rig")
    results = {name: NodeLossRun() for name in CONTROLLERS}
    try:
        push_test_images(cluster)
        kubeflow_operator.push_init_image(cluster)
        for number in range(trials):
            for operator_name in operators:
                print(f"  {operator_name} operator, trial {number + 1} ...", flush=True)
                kind = operator_name.split("-")[0]
                operator = _start_operator(cluster, kind, directory / f"{operator_name}-{number}")
                try:
                    namespace = cluster.namespace(f"loss-{operator_name}-{number}")
                    if operator_name == "torchjob-inplace":
                        repaired = inplace_node.vanished_trial(cluster, namespace)
                        results[operator_name].recovery.append(None if repaired is None else repaired["first_step"])
                        results[operator_name].succeeded.append(repaired is not None)
                    else:
                        trial(cluster, namespace, results[operator_name], window, operator_name.endswith("-warm"))
                finally:
                    operator.stop()
    finally:
        delete(name, directory / "rig")
    return results


def report(results: dict[str, NodeLossRun], window: float) -> str:
    def shown(run: NodeLossRun) -> str:
        done = [r for r in run.recovery if r is not None]
        text = f"{len(done)} of {len(run.recovery)} recovered in {window:.0f} s"
        if done:
            text += f", median {median(done):.1f} s"
        text += f"; Succeeded {sum(run.succeeded)} of {len(run.succeeded)}"
        waits = sorted(set(run.waiting_on) - {"nothing on the lost node"})
        return text + (f"; left on the lost node: {'; '.join(waits)}" if waits else "")

    t, w, i, k = (results[name] for name in CONTROLLERS)
    rows = [
        "| three real nodes, the README's MNIST job | torchjob operator | Kubeflow training-operator v1.8.1 |",
        "|---|---|---|",
        f"| node of worker-1 stopped → first step of the new group | {shown(t)} | {shown(k)} |",
        f'| … with `torchjob.io/warm-start: "true"` (survivors restart in their Pods) | {shown(w)} | |',
        f"| the in-place job (a warm spare on the third node) → first step of the repaired group | {shown(i)} | |",
    ]
    for label, run in (("", t), (", warm", w)):
        if run.phases:
            keys = ("declared", "started", "resumed")
            phases = " / ".join(f"{median(p[key] for p in run.phases):.1f}" for key in keys)
            rows.append(
                f"| … torchjob{label}: loss declared / new master started / its first step (s after the stop) "
                f"| {phases} | |"
            )
    if t.floor:
        rows.append(f"| cold floor: the same job applied → its first step resumed (s) | {median(t.floor):.1f} | |")
    return "\n".join(rows)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 180
    chosen = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else CONTROLLERS
    if not set(chosen) <= set(CONTROLLERS):
        sys.exit(f"bench.node_loss: OPERATORS must name some of {', '.join(CONTROLLERS)}, got {sys.argv[3]!r}")
    measured = measure(count, seconds, chosen)
    print(report(measured, seconds))
    print(json.dumps({name: run.__dict__ for name, run in measured.items()}))
