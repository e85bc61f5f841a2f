"""What a scenario on a real cluster waits for and reads: a PyTorchJob's condition, a Pod's phase or log line, an
in-place job's warm spare, a checkpoint on a claim, the step the operator last heard. Each wait fails with the state
that explains it (the Pods, the events, the log)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kuberig import Cluster
from tests.support.cluster_jobs import get_job
from tests.support.waits import wait_until


def _pods(cluster: Cluster, namespace: str) -> str:
    return str(cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout)


def wait_for_condition(cluster: Cluster, namespace: str, job: str, kinds: set[str], timeout: float) -> Any:
    """Poll the PyTorchJob until one of ``kinds`` is a true condition; return the job. On a timeout, fail with
    its status and the pods' state, which say why."""

    def reached() -> Any:
        found = get_job(cluster, namespace, job)
        conditions = (found.get("status") or {}).get("conditions") or []
        return found if any(c["type"] in kinds and c["status"] == "True" for c in conditions) else None

    def why() -> str:
        found = get_job(cluster, namespace, job)
        return f"{(found.get('status') or {}).get('conditions')}\n{_pods(cluster, namespace)}"

    return wait_until(reached, timeout, f"{job} to reach one of {sorted(kinds)}", every=1, detail=why)


def event_messages(cluster: Cluster, namespace: str) -> str:
    """Every event's message in ``namespace``, space-separated: what the operator and the kubelet said."""
    return cluster.kubectl("get", "events", "-n", namespace, "-o", "jsonpath={.items[*].message}").stdout


def wait_for_log(cluster: Cluster, namespace: str, pod: str, text: str, timeout: float) -> None:
    """Until ``pod``'s output says ``text`` (the job's Pods shown if it never does)."""

    def said() -> bool:
        return text in cluster.kubectl("logs", "-n", namespace, pod, check=False).stdout

    wait_until(said, timeout, f"{pod} to say {text!r}", every=0.5, detail=lambda: _pods(cluster, namespace))


def wait_beside_a_spare(cluster: Cluster, namespace: str, name: str, pod: str, text: str) -> None:
    """Until an in-place job's ``pod`` says ``text`` and its warm spare is reported ready."""

    def log() -> str:
        return str(cluster.kubectl("logs", "-n", namespace, pod, check=False).stdout)

    def ready() -> bool:
        found = get_job(cluster, namespace, name)
        return text in log() and (found.get("status") or {}).get("sparesReady") == 1

    def why() -> str:
        events = cluster.kubectl("get", "events", "-n", namespace, check=False).stdout
        return f"\n{_pods(cluster, namespace)}\n{events[-3000:]}\n{log()[-1500:]}"

    wait_until(ready, 300, f"{pod} to say {text!r} beside a warm spare", every=0.5, detail=why)


def wait_for_pod_phase(cluster: Cluster, namespace: str, pod: str, phase: str, timeout: float) -> None:
    """Waits for the Pod's phase; a Pod that ends in the other terminal phase fails at once, with its log."""

    seen: list[str | None] = [None]  # the phase the last look read: the check reads it, the others say it

    def reached() -> bool:
        found = cluster.kubectl("get", "pod", pod, "-n", namespace, "-o", "json", check=False)
        seen[0] = json.loads(found.stdout).get("status", {}).get("phase") if found.returncode == 0 else None
        return seen[0] == phase

    def ended() -> str | None:
        return f"pod {pod} ended {seen[0]}" if seen[0] in ("Succeeded", "Failed") else None

    def said() -> str:
        events = cluster.kubectl("get", "events", "-n", namespace, check=False).stdout
        log = cluster.kubectl("logs", pod, "-n", namespace, "--all-containers", check=False)
        return f"phase {seen[0]}; its log:\n{(log.stdout + log.stderr)[-3000:]}\nevents:\n{events[-2000:]}"

    wait_until(reached, timeout, f"pod {pod} to be {phase}", every=0.5, detail=said, ended=ended)


def wait_for_a_checkpoint(data: Path, timeout: float) -> None:
    """Until the job's script has written a checkpoint to the claim whose folder on the host is ``data``."""
    wait_until(lambda: list((data / "checkpoints").glob("*")), timeout, "a checkpoint written to the claim", every=0.5)


def reported_step(cluster: Cluster, namespace: str, job: str) -> int:
    """The last step the job's scripts reported, as the operator keeps it in the PyTorchJob's status; -1 before any."""
    found = get_job(cluster, namespace, job)
    metrics = ((found.get("status") or {}).get("trainerStatus") or {}).get("metrics") or []
    return next((int(m["value"]) for m in metrics if m["name"] == "step"), -1)
