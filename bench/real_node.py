"""The torchjob operator beside Kubeflow's own training-operator (v1.8.1), on one real node, in the same run.

torchjob's operator runs in the cluster as users deploy it (two replicas, leader election); Kubeflow's beside the
cluster, as kuberig runs it. They take turns, trial by trial, each with its own CRD. The same jobs go to both:

- Kubeflow's classic simple.yaml (1 Master + 1 Worker, one epoch of MNIST): ``kubectl apply`` → every Pod Running
  → Succeeded;
- the same job over three epochs, the Worker's training process SIGKILLed from the host once it has done 10
  steps: kill → the Worker's first step after it, and the steps lost; for torchjob also with
  ``torchjob.io/warm-start: "true"`` (the Pods stay, each one's launcher forks the script again);
- torchjob only, the in-place MNIST job (one warm spare Pod), worker-1 lost in epoch 2: by SIGKILL, by an eviction
  (the Eviction API, as `kubectl drain`), and frozen by SIGSTOP (``bench.in_place_node``);
- once per operator at the end, ``restartPolicy: ExitCode`` with exit 1 and with SIGKILL, and a crash loop under
  OnFailure with ``backoffLimit: 2``: the state and message each shows.

``python -m bench --only real-node``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from tests.support.images import push_test_images
from tests.support.paths import DATA

from bench import alternating, in_place_node
from bench.cluster_kit import container_restarts, logged_steps, start_operator, wait
from bench.records import Run
from kuberig import Cluster
from kuberig.addons import kubeflow_operator

OPERATORS = ("torchjob", "kubeflow")
NAMESPACE = "kubeflow"  # simple.yaml's own


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


def _clean(rig: Cluster, job: str) -> None:
    rig.kubectl("delete", "pytorchjob", job, "-n", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=120)
    wait(lambda: not _pods(rig, job), 120)


def _latency(rig: Cluster, run: Run, name: str) -> None:
    job = _job("latency", epochs=1)
    started = time.monotonic()
    rig.apply(job)

    def all_running() -> bool:
        pods = _pods(rig, "latency")
        return len(pods) == 2 and all(p["status"].get("phase") in ("Running", "Succeeded") for p in pods)

    run.keep(f"{name} running", wait(all_running, 300))
    done = wait(lambda: _state(rig, "latency")[0] in ("Succeeded", "Failed"), 300)
    succeeded = done is not None and _state(rig, "latency")[0] == "Succeeded"
    run.keep(f"{name} succeeded", time.monotonic() - started if succeeded else None)
    _clean(rig, "latency")


def _worker_log(rig: Cluster, job: str) -> str:
    return rig.kubectl("logs", "-n", NAMESPACE, f"{job}-worker-0", check=False).stdout


WARM_MARK = "torchjob: attempt 1 starts in this Pod, warm"


def _recovery(cluster: Cluster, run: Run, name: str) -> None:
    """The plain job over three epochs, the Worker's training process SIGKILLed after 10 steps: kill → its first
    step after (``{name} kill first step``), and the steps it had done, which the plain script loses."""
    rig = cluster
    warm = name.endswith(" warm")
    annotations = {"torchjob.io/warm-start": "true"} if warm else {}
    rig.apply(_job("kill", epochs=3, annotations=annotations))
    if wait(lambda: logged_steps(_worker_log(rig, "kill")) >= 10, 300) is None:
        run.keep(f"{name} kill first step", None)
        _clean(rig, "kill")
        return
    before = {p["metadata"]["uid"]: p for p in _pods(rig, "kill")}
    worker = next(p for p in before.values() if p["metadata"]["name"] == "kill-worker-0")
    done = logged_steps(_worker_log(rig, "kill"))
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
            return WARM_MARK in log and logged_steps(log.split(WARM_MARK, 1)[1]) >= 5
        restarts = container_restarts([current])
        fresh = current["metadata"]["uid"] != worker["metadata"]["uid"] or restarts > 0
        return fresh and logged_steps(_worker_log(rig, "kill")) >= 5

    took = wait(restarted_and_stepping, 180, poll=0.25)
    run.keep(f"{name} kill first step", None if took is None else time.monotonic() - killed_at)
    if took is not None:
        run.keep(f"{name} steps lost", done, "steps")  # no checkpoint: the new attempt starts at step 0
        wait(lambda: _state(rig, "kill")[0] in ("Succeeded", "Failed"), 300)
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


def _behaviour(rig: Cluster, run: Run, name: str) -> None:
    for label, (replica, spec, program) in BEHAVIOURS.items():
        job = _job("behaviour", epochs=1, replica=replica, spec=spec)
        master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
        master["command"] = ["python3", "-c", "import time; time.sleep(600)"]
        worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        worker["command"] = ["sh", "-c", f'python3 -c "{program}"; exit $?']
        rig.apply(job)
        wait(lambda: _state(rig, "behaviour")[0] == "Failed", 90)
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
        text = after if worker_pods else after + "; no Worker Pod left"
        run.describe(f"{name} behaviour, {label}", text.replace("|", "/"))
        _clean(rig, "behaviour")


def _in_place(cluster: Cluster, run: Run) -> None:
    """The in-place MNIST job, worker-1 lost three ways: SIGKILL, eviction, SIGSTOP."""
    losses: dict[str, Callable[[], dict[str, float] | None]] = {
        "kill": lambda: in_place_node.trial(cluster, NAMESPACE),
        "evicted": lambda: in_place_node.evicted_trial(cluster, NAMESPACE),
        "frozen": lambda: in_place_node.trial(cluster, NAMESPACE, signal.SIGSTOP),
    }
    for way, lose in losses.items():
        found = lose()
        run.keep(f"in place {way} first step", None if found is None else found["first_step"])
        run.keep(f"in place {way} re-formed", None if found is None else found["reformed"])
        run.keep(f"in place {way} stall", None if found is None else found["stall"])


def record(run: Run, trials: int) -> None:
    def prepare(cluster: Cluster) -> None:
        push_test_images(cluster)
        kubeflow_operator.push_init_image(cluster)
        cluster.namespace(NAMESPACE)

    def trial(cluster: Cluster, name: str) -> None:
        _latency(cluster, run, name)
        _recovery(cluster, run, name)
        if name == "torchjob":
            _recovery(cluster, run, "torchjob warm")
            _in_place(cluster, run)

    behaviour = ("behaviour", lambda cluster, name: _behaviour(cluster, run, name))
    alternating.alternate("real-node", prepare, OPERATORS, trials, start_operator, trial, behaviour)
