"""In-place repair on the real node: one trial of examples/mnist/job-inplace.yaml (1 Master + 2 Workers, one
warm spare Pod) with worker-1's training process SIGKILLed from the host in epoch 2.

Measured against the moment of the kill, from the Master Pod's own log with the kubelet's timestamps (the
node and this process share one clock): when rank 0 had re-formed the group with the spare, and when its
first step after that completed (the job logs every step). Run by ``bench/real_node.py`` beside the
operators' group restarts.

``python -m bench.inplace_node [TRIALS]`` runs the frozen case on its own (#31): worker-1's process SIGSTOPped,
nothing fails or closes, and the operator (deployed from ``deploy/``, its report endpoint on) must find the one
member the others wait for from the announcements the Pods send it (one every 0.15 s, each also reading the membership; three missed confirm it).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

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


def trial(cluster: Cluster, namespace: str, sent: signal.Signals = signal.SIGKILL) -> dict[str, float] | None:
    """{"reformed": s, "first_step": s} after the kill (``sent``: SIGSTOP freezes the process instead), or None
    when the job was not repaired in place."""
    job = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["namespace"] = namespace
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["args"] = ["--epochs", "3", "--log-interval", "1"]
    cluster.apply(job)
    try:

        def in_epoch_2_beside_a_spare() -> bool:
            log = cluster.kubectl("logs", "-n", namespace, f"{JOB}-worker-1", check=False).stdout
            return "epoch: 2/" in log and _status(cluster, namespace).get("sparesReady") == 1

        if not _wait(in_epoch_2_beside_a_spare, 300):
            return None
        pids = cluster.container_pids(namespace, f"{JOB}-worker-1")  # kubectl: found before the clock starts
        killed_at = time.time()
        for pid in pids:
            os.kill(pid, sent)
        finished = _wait(lambda: "completionTime" in _status(cluster, namespace), 400)
        if not finished or _status(cluster, namespace).get("repairs") != 1:
            return None
        log = cluster.kubectl("logs", "--timestamps", "-n", namespace, f"{JOB}-master-0").stdout.splitlines()
        repaired = next(i for i, line in enumerate(log) if "group repaired in place" in line)
        first = next(line for line in log[repaired + 1 :] if "batch: " in line)
        found = {"reformed": _stamp(log[repaired]) - killed_at, "first_step": _stamp(first) - killed_at}
        # A frozen peer: when the Master's watching thread saw the repair published and left its step.
        left = next((line for line in log[:repaired] if "left the step" in line), None)
        return found if left is None else {"left": _stamp(left) - killed_at, **found}
    finally:
        cluster.kubectl("delete", "pytorchjob", JOB, "-n", namespace, "--ignore-not-found", "--wait=true")
        _wait(lambda: not cluster.kubectl_json("get", "pods", "-n", namespace)["items"], 120)


def frozen(trials: int) -> list[dict[str, float] | None]:
    """SIGSTOP trials on a fresh one-node rig with the torchjob operator."""
    from tests.support.images import push_test_images

    from bench.real_node import _start_operator
    from kuberig import ClusterConfig, NodeConfig, create, delete

    directory = Path(tempfile.mkdtemp(prefix="bench-inplace-node-"))
    name = f"bench-{os.getpid()}"
    cluster = create(ClusterConfig(name, (NodeConfig("kubelet"),)), directory / "rig")
    try:
        push_test_images(cluster)
        namespace = cluster.namespace("frozen")
        operator = _start_operator(cluster, "torchjob", directory / "operator")
        try:
            found = []
            for number in range(trials):
                found.append(trial(cluster, namespace, signal.SIGSTOP))
                print(f"  trial {number + 1}: {found[-1]}", flush=True)
            return found
        finally:
            operator.stop()
    finally:
        delete(name, directory / "rig")


if __name__ == "__main__":
    results = frozen(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    repaired = [r for r in results if r is not None]
    firsts = sorted(r["first_step"] for r in repaired)
    if firsts:
        print(
            f"SIGSTOP in a Pod -> first step of the repaired group: median {firsts[len(firsts) // 2]:.2f} s "
            f"({len(repaired)} of {len(results)} repaired in place; all: {', '.join(f'{v:.2f}' for v in firsts)})"
        )
    else:
        print("never repaired in place")
