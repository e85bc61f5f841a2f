"""The torchjob operator beside Kubeflow's own training-operator (v1), on the same real node, in the same run.

One real node (kuberig); the operators take turns, each with its own CRD. The same jobs go to both:
- Kubeflow's classic simple.yaml (1 Master + 1 Worker, one epoch of MNIST): ``kubectl apply`` → every Pod
  Running (pod start latency) → Succeeded;
- the same job over three epochs, with the Worker's training process SIGKILLed from the host once it has done
  10 steps: does the job recover, how long from the kill to the Worker's first step after it, steps lost;
  for torchjob also with ``torchjob.io/warm-start: "true"`` (the Pods stay, each one's launcher forks the script
  again, torch already imported; the kill ends the training process, not its Pod's launcher);
- behaviour under ``restartPolicy: ExitCode`` with exit 1 and with SIGKILL, and a crash loop under OnFailure
  with ``backoffLimit: 2``: the state and message each operator shows (a table for the README).

    .venv/bin/python -m bench.real_node [TRIALS] [--recovery]   (--recovery: the SIGKILL trials only)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tests.support.images import push_test_images
from tests.support.operator import deploy_operator
from tests.support.paths import DATA, DEPLOY
from tests.support.servers import free_port

from bench import alternating, inplace_node
from kuberig import Cluster
from kuberig.addons import kubeflow_operator

OPERATORS = ("torchjob", "kubeflow")
NAMESPACE = "kubeflow"  # simple.yaml's own


@dataclass
class OperatorRun:
    to_running: list[float] = field(default_factory=list)
    to_succeeded: list[float] = field(default_factory=list)
    recovery: list[float | None] = field(default_factory=list)  # kill → first step after it; None: never
    warm_recovery: list[float | None] = field(default_factory=list)  # torchjob only: the same, warm restarts
    steps_lost: list[int] = field(default_factory=list)
    behaviour: dict[str, str] = field(default_factory=dict)
    # torchjob only: the in-place MNIST job, kill → re-formed and → first step (None: not repaired)
    inplace: list[dict[str, float] | None] = field(default_factory=list)


def _job(name: str, epochs: int, **changes: Any) -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load((DATA / "valid" / "kubeflow-mnist.yaml").read_text())
    job["metadata"]["name"] = name
    job["metadata"]["annotations"] = changes.get("annotations", {})
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["command"][-1] = f"--epochs={epochs}"
        spec["template"]["spec"]["containers"][0]["command"].append("--log-interval=5")
        spec.update(changes.get("replica", {}))
    job["spec"].update(changes.get("spec", {}))
    return job


def _pods(rig: Cluster, job: str) -> list[dict[str, Any]]:
    selector = f"training.kubeflow.org/job-name={job}"
    items: list[dict[str, Any]] = rig.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return items


def _state(rig: Cluster, job: str) -> tuple[str, str]:
    """The job's last true condition (what `kubectl get` shows as State) and its message."""
    found = rig.kubectl_json("get", "pytorchjob", job, "-n", NAMESPACE)
    true = [c for c in found.get("status", {}).get("conditions") or [] if c.get("status") == "True"]
    return (true[-1]["type"], true[-1].get("message", "")) if true else ("", "")


def _wait(check: Any, timeout: float, poll: float = 0.2) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(poll)
    return None


def container_restarts(pods: list[dict[str, Any]]) -> int:
    """How often the kubelet restarted the containers of ``pods``, in place, all told."""
    return sum(s.get("restartCount", 0) for p in pods for s in p["status"].get("containerStatuses") or [])


def _clean(rig: Cluster, job: str) -> None:
    rig.kubectl("delete", "pytorchjob", job, "-n", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=120)
    _wait(lambda: not _pods(rig, job), 120)


def _latency(rig: Cluster, run: OperatorRun) -> None:
    job = _job("latency", epochs=1)
    started = time.monotonic()
    rig.apply(job)

    def all_running() -> bool:
        pods = _pods(rig, "latency")
        return len(pods) == 2 and all(p["status"].get("phase") in ("Running", "Succeeded") for p in pods)

    running = _wait(all_running, 300)
    done = _wait(lambda: _state(rig, "latency")[0] in ("Succeeded", "Failed"), 300)
    if running is not None:
        run.to_running.append(running)
    if done is not None and _state(rig, "latency")[0] == "Succeeded":
        run.to_succeeded.append(time.monotonic() - started)
    _clean(rig, "latency")


def _worker_log(rig: Cluster, job: str) -> str:
    return rig.kubectl("logs", "-n", NAMESPACE, f"{job}-worker-0", check=False).stdout


def _steps(log: str) -> int:
    """The Worker's last reported step (batch lines come every 5 steps)."""
    lines = [line for line in log.splitlines() if "Rank 1: epoch: " in line and "batch: " in line]
    if not lines:
        return 0
    epoch = int(lines[-1].split("epoch: ")[1].split("/")[0])
    batch, per_epoch = (int(x) for x in lines[-1].split("batch: ")[1].split(",")[0].split("/"))
    return (epoch - 1) * per_epoch + batch


WARM_MARK = "torchjob: attempt 1 starts in this Pod, warm"


def _recovery(cluster: Cluster, run: OperatorRun, warm: bool = False) -> None:
    rig = cluster
    annotations = {"torchjob.io/warm-start": "true"} if warm else {}
    rig.apply(_job("kill", epochs=3, annotations=annotations))
    times = run.warm_recovery if warm else run.recovery
    if _wait(lambda: _steps(_worker_log(rig, "kill")) >= 10, 300) is None:
        times.append(None)
        _clean(rig, "kill")
        return
    before = {p["metadata"]["uid"]: p for p in _pods(rig, "kill")}
    worker = next(p for p in before.values() if p["metadata"]["name"] == "kill-worker-0")
    done = _steps(_worker_log(rig, "kill"))
    victims = cluster.container_pids(NAMESPACE, "kill-worker-0")
    if warm:  # the training process, as the OOM killer or a crash ends it: not its Pod's launcher
        victims = [pid for pid in victims if b"torchjob.launch" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
    killed_at = time.monotonic()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)

    def restarted_and_stepping() -> bool:
        pods = {p["metadata"]["name"]: p for p in _pods(rig, "kill")}
        current = pods.get("kill-worker-0")
        if current is None:
            return False
        if warm:
            log = _worker_log(rig, "kill")
            return WARM_MARK in log and _steps(log.split(WARM_MARK, 1)[1]) >= 5
        restarts = container_restarts([current])
        fresh = current["metadata"]["uid"] != worker["metadata"]["uid"] or restarts > 0
        return fresh and _steps(_worker_log(rig, "kill")) >= 5

    took = _wait(restarted_and_stepping, 180, poll=0.25)
    times.append(took if took is None else time.monotonic() - killed_at)
    if took is not None:
        run.steps_lost.append(done)  # the plain script keeps no checkpoint: the new attempt starts at step 0
        _wait(lambda: _state(rig, "kill")[0] in ("Succeeded", "Failed"), 300)
    _clean(rig, "kill")


BEHAVIOURS = {
    "ExitCode, Worker exits 1": ({"restartPolicy": "ExitCode"}, {}, "import sys; sys.exit(1)"),
    # Not as the container's pid 1, which the kernel never lets a signal without a handler kill: sh stays pid 1.
    "ExitCode, Worker SIGKILLed (137)": (
        {"restartPolicy": "ExitCode"},
        {"runPolicy": {"backoffLimit": 1}},
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    ),
    "OnFailure crash loop, backoffLimit 2": (
        {"restartPolicy": "OnFailure"},
        {"runPolicy": {"backoffLimit": 2}},
        "import sys; sys.exit(3)",
    ),
}


def _behaviour(rig: Cluster, run: OperatorRun) -> None:
    for label, (replica, spec, program) in BEHAVIOURS.items():
        job = _job("behaviour", epochs=1, replica=replica, spec=spec)
        master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
        master["command"] = ["python3", "-c", "import time; time.sleep(600)"]
        worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        worker["command"] = ["sh", "-c", f'python3 -c "{program}"; exit $?']
        rig.apply(job)
        _wait(lambda: _state(rig, "behaviour")[0] == "Failed", 90)
        time.sleep(10)  # what each operator does with the other replicas once the job has failed
        state, message = _state(rig, "behaviour")
        pods = _pods(rig, "behaviour")
        restarts = container_restarts(pods)
        worker_pods = [p for p in pods if "worker" in p["metadata"]["name"]]
        after = state or "no condition"
        if message:
            after += f" ({message[:110]})"
        masters = [p for p in pods if "master" in p["metadata"]["name"]]
        if not masters or masters[0]["status"].get("phase") != "Running":
            master = "stopped"
        elif masters[0]["metadata"].get("deletionTimestamp"):
            master = "being stopped"  # its pid 1 ignores SIGTERM: the kubelet kills it after the grace period
        else:
            master = "running"
        after += f"; Worker container restarts {restarts}; Master {master}"
        run.behaviour[label] = after if worker_pods else after + "; no Worker Pod left"
        _clean(rig, "behaviour")


def _start_operator(cluster: Cluster, name: str, directory: Path) -> Any:
    """One operator owns PyTorchJobs at a time, each with its own CRD (Kubeflow's prunes torchjob's status)."""
    if name == "kubeflow":
        return kubeflow_operator.start(cluster, directory)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(DEPLOY / "crd.yaml"))
    # One reconcile worker, as Kubeflow's operator runs (--controller-threads 1). Client rate limits
    # (Kubeflow: 20 QPS, burst 30; torchjob: none) do not bind with one job at a time.
    # With its report endpoint, as deploy/ runs it: progress, hang detection and in-place repair need it.
    return deploy_operator(cluster, directory, "--workers=1", f"--report-address={cluster.host_ip}:{free_port()}")


def measure(trials: int = 3, recovery_only: bool = False) -> dict[str, OperatorRun]:
    results = {name: OperatorRun() for name in OPERATORS}

    def prepare(cluster: Cluster) -> None:
        push_test_images(cluster)
        kubeflow_operator.push_init_image(cluster)
        cluster.namespace(NAMESPACE)

    def trial(cluster: Cluster, name: str) -> None:
        if not recovery_only:
            _latency(cluster, results[name])
        _recovery(cluster, results[name])
        if name == "torchjob":
            _recovery(cluster, results[name], warm=True)
        if name == "torchjob" and not recovery_only:
            results[name].inplace.append(inplace_node.trial(cluster, NAMESPACE))

    behaviour = ("behaviour", lambda cluster, name: None if recovery_only else _behaviour(cluster, results[name]))
    alternating.alternate("real-node", prepare, OPERATORS, trials, _start_operator, trial, behaviour)
    return results


if __name__ == "__main__":
    numbers = [a for a in sys.argv[1:] if a.isdigit()]
    measured = measure(int(numbers[0]) if numbers else 3, recovery_only="--recovery" in sys.argv)
    from bench.real_node_report import report

    print(report(measured))
    print(json.dumps({name: run.__dict__ for name, run in measured.items()}))
