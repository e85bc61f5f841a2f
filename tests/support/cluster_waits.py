"""What a scenario on a real cluster waits for and reads: a PyTorchJob's condition, a Pod's phase or log line, an
in-place job's warm spare, a checkpoint on a claim, the step the operator last heard. Each wait fails with the state
that explains it (the Pods, the events, the log)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kuberig import Cluster
from tests.support.waits import wait_until


def wait_for_condition(cluster: Cluster, namespace: str, job: str, kinds: set[str], timeout: float) -> Any:
    """Poll the PyTorchJob until one of ``kinds`` is a true condition; return the job. On a timeout, fail with
    its status and the pods' state, which say why."""
    deadline = time.monotonic() + timeout
    while True:
        found = json.loads(cluster.kubectl("get", "pytorchjob", job, "-n", namespace, "-o", "json").stdout)
        conditions = found.get("status", {}).get("conditions", [])
        if any(c["type"] in kinds and c["status"] == "True" for c in conditions):
            return found
        if time.monotonic() > deadline:
            pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
            pytest.fail(f"{job} reached none of {sorted(kinds)} in {timeout:.0f}s: {conditions}\n{pods}")
        time.sleep(1)


def event_messages(cluster: Cluster, namespace: str) -> str:
    """Every event's message in ``namespace``, space-separated: what the operator and the kubelet said."""
    return cluster.kubectl("get", "events", "-n", namespace, "-o", "jsonpath={.items[*].message}").stdout


def wait_for_log(cluster: Cluster, namespace: str, pod: str, text: str, timeout: float) -> None:
    """Until ``pod``'s output says ``text`` (the job's Pods shown if it never does)."""
    deadline = time.monotonic() + timeout
    while text not in cluster.kubectl("logs", "-n", namespace, pod, check=False).stdout:
        if time.monotonic() >= deadline:
            pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
            raise AssertionError(f"{pod} never said {text!r}:\n{pods}")
        time.sleep(0.5)


def wait_beside_a_spare(cluster: Cluster, namespace: str, name: str, pod: str, text: str) -> None:
    """Until an in-place job's ``pod`` says ``text`` and its warm spare is reported ready."""
    deadline = time.monotonic() + 300
    while True:
        found = cluster.kubectl_json("get", "pytorchjob", name, "-n", namespace)
        log = cluster.kubectl("logs", "-n", namespace, pod, check=False).stdout
        if text in log and (found.get("status") or {}).get("sparesReady") == 1:
            return
        if time.monotonic() > deadline:
            pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
            events = cluster.kubectl("get", "events", "-n", namespace, check=False).stdout
            pytest.fail(f"{pod} never said {text!r} beside a warm spare:\n{pods}\n{events[-3000:]}\n{log[-1500:]}")
        time.sleep(0.5)


def wait_for_pod_phase(cluster: Cluster, namespace: str, pod: str, phase: str, timeout: float) -> None:
    """Waits for the Pod's phase; a Pod that ends in the other terminal phase fails at once, with its log."""
    deadline = time.monotonic() + timeout
    while True:
        found = cluster.kubectl("get", "pod", pod, "-n", namespace, "-o", "json", check=False)
        now = json.loads(found.stdout).get("status", {}).get("phase") if found.returncode == 0 else None
        if now == phase:
            return
        ended = now in ("Succeeded", "Failed")
        if ended or time.monotonic() > deadline:
            events = cluster.kubectl("get", "events", "-n", namespace, check=False).stdout
            log = cluster.kubectl("logs", pod, "-n", namespace, "--all-containers", check=False)
            said = f"its log:\n{(log.stdout + log.stderr)[-3000:]}\nevents:\n{events[-2000:]}"
            pytest.fail(
                f"pod {pod} ended {now}, never {phase}; {said}"
                if ended
                else f"pod {pod} never reached {phase} in {timeout:.0f}s ({now}); {said}"
            )
        time.sleep(0.5)


def wait_for_a_checkpoint(data: Path, timeout: float) -> None:
    """Until the job's script has written a checkpoint to the claim whose folder on the host is ``data``."""
    wait_until(lambda: list((data / "checkpoints").glob("*")), timeout, "a checkpoint written to the claim", every=0.5)


def reported_step(cluster: Cluster, namespace: str, job: str) -> int:
    """The last step the job's scripts reported, as the operator keeps it in the PyTorchJob's status; -1 before any."""
    found = cluster.kubectl_json("get", "pytorchjob", job, "-n", namespace)
    metrics = ((found.get("status") or {}).get("trainerStatus") or {}).get("metrics") or []
    return next((int(m["value"]) for m in metrics if m["name"] == "step"), -1)
