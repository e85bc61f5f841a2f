"""The same TrainJob under Kubeflow Trainer v2 (its controller manager and the JobSet controller it drives) and
under torchjob's operator, on the same real node, in the same run: the measured rows of the TrainJob guide's
"what torchjob adds to Trainer v2".

One real node (kuberig); the controllers take turns, trials alternating. Kubeflow's ``torch-distributed``
runtime as Trainer's module ships it; the TrainJob is ``examples/mnist/trainjob.yaml`` on 2 nodes (the plain
script under torchrun, no checkpoint). Each trial:
- a clean run: ``kubectl apply`` → both Pods Running → Complete;
- the same job over three epochs with rank 1's training process SIGKILLed from the host after 20 steps: the
  outcome, kill → rank 1's first step after it (the script starts over), and apply → the end;
- torchjob only: the in-place MNIST job as a TrainJob (three nodes and a spare, ``bench.inplace_node``), rank 2's
  process SIGKILLed in epoch 2 (Trainer has no in-place repair);
and once per controller, a script that fails at once on every node (exit 2): what the TrainJob says, and when.

    .venv/bin/python -m bench.trainer_v2 [TRIALS]
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import yaml
from tests.support.images import push_example_images
from tests.support.operator import deploy_operator
from tests.support.paths import DEPLOY, MNIST
from tests.support.servers import free_port

from bench import alternating, inplace_node
from bench.real_node import _steps, _wait, container_restarts
from kuberig import Cluster, toolchain
from kuberig.addons import kubeflow_trainer

CONTROLLERS = ("torchjob", "trainer")
NAMESPACE = "bench"
JOB = "mnist-trainjob"
CRASH = "echo 'train.py: error: --data: no such directory' >&2; exit 2"
CRASH_WAIT = 180  # seconds a crash-looping job is watched for an end


@dataclass
class ControllerRun:
    to_created: list[float] = field(default_factory=list)
    to_running: list[float] = field(default_factory=list)
    to_complete: list[float] = field(default_factory=list)
    recovery: list[float | None] = field(default_factory=list)  # kill → rank 1's first step after it
    kill_outcome: list[str] = field(default_factory=list)
    kill_total: list[float] = field(default_factory=list)
    crash: str = ""
    # torchjob only: the in-place MNIST job as a TrainJob, kill → first step of the repaired group (None: not)
    inplace: list[dict[str, float] | None] = field(default_factory=list)


def _trainjob(epochs: int, command: list[str] | None = None) -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load((MNIST / "trainjob.yaml").read_text())
    trainer = job["spec"]["trainer"]
    trainer.update(numNodes=2, args=["--epochs", str(epochs), "--batch-size", "32", "--log-interval", "5"])
    if command is not None:
        trainer.update(command=command, args=[])
    return job


def _pods(rig: Cluster) -> list[dict[str, Any]]:
    selector = f"jobset.sigs.k8s.io/jobset-name={JOB}"  # both controllers' Pods carry JobSet's labels
    items: list[dict[str, Any]] = rig.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _rank1(rig: Cluster) -> dict[str, Any] | None:
    index = "batch.kubernetes.io/job-completion-index"
    return next((p for p in _pods(rig) if p["metadata"]["labels"].get(index) == "1"), None)


def _rank1_log(rig: Cluster) -> str:
    pod = _rank1(rig)
    return "" if pod is None else rig.kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"], check=False).stdout


def _ended(rig: Cluster) -> tuple[str, str] | None:
    found = rig.kubectl_json("get", "trainjob", JOB, "-n", NAMESPACE)
    for condition in found.get("status", {}).get("conditions") or []:
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return condition["type"], condition.get("message", "")
    return None


def _clean(rig: Cluster) -> None:
    rig.kubectl("delete", "trainjob", JOB, "-n", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=120)
    _wait(lambda: not _pods(rig), 120)


def _clean_run(rig: Cluster, run: ControllerRun) -> None:
    started = time.monotonic()
    rig.apply(_trainjob(epochs=1), NAMESPACE)
    created = _wait(lambda: len(_pods(rig)) == 2, 300, poll=0.1)
    running = _wait(
        lambda: len(_pods(rig)) == 2 and all(p["status"].get("phase") == "Running" for p in _pods(rig)), 300
    )
    _wait(lambda: _ended(rig) is not None, 300)
    ended = _ended(rig)
    if created is not None and running is not None:
        run.to_created.append(created)
        run.to_running.append(created + running)
    if ended is not None and ended[0] == "Complete":
        run.to_complete.append(time.monotonic() - started)
    _clean(rig)


def _kill_run(cluster: Cluster, run: ControllerRun) -> None:
    started = time.monotonic()
    cluster.apply(_trainjob(epochs=3), NAMESPACE)
    if _wait(lambda: _steps(_rank1_log(cluster)) >= 20, 300) is None:
        run.recovery.append(None)
        run.kill_outcome.append("never reached step 20")
        _clean(cluster)
        return
    victim = _rank1(cluster)
    assert victim is not None
    name, uid = victim["metadata"]["name"], victim["metadata"]["uid"]
    restarts = container_restarts([victim])
    killed_at = time.monotonic()
    for pid in cluster.container_pids(NAMESPACE, name, container="node"):
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
        if any(b"train_plain.py" in a for a in argv) and not any(b"torchrun" in a for a in argv):
            os.kill(pid, signal.SIGKILL)  # the training process, not torchrun's agent

    def started_over() -> bool:
        pod = _rank1(cluster)
        if pod is None:
            return False
        again = container_restarts([pod])
        fresh = pod["metadata"]["uid"] != uid or again > restarts
        return fresh and 0 < _steps(_rank1_log(cluster)) < 20

    took = _wait(started_over, 240, poll=0.25)
    run.recovery.append(None if took is None else time.monotonic() - killed_at)
    _wait(lambda: _ended(cluster) is not None, 400)
    ended = _ended(cluster)
    run.kill_outcome.append(ended[0] if ended else "still running after 400 s")
    if ended and ended[0] == "Complete":
        run.kill_total.append(time.monotonic() - started)
    _clean(cluster)


def _crash_run(rig: Cluster, run: ControllerRun) -> None:
    started = time.monotonic()
    rig.apply(_trainjob(epochs=1, command=["sh", "-c", CRASH]), NAMESPACE)
    took = _wait(lambda: _ended(rig) is not None, CRASH_WAIT, poll=0.5)
    ended = _ended(rig)
    restarts = container_restarts(_pods(rig))
    if ended is None or took is None:
        run.crash = f"no end after {CRASH_WAIT} s ({restarts} container restarts so far)"
    else:
        message = ended[1].replace("\n", " ").replace("|", "/")
        run.crash = f"{ended[0]} after {time.monotonic() - started:.0f} s: {message[:300] or '(no message)'}"
    _clean(rig)


def _start(cluster: Cluster, name: str, directory: Path) -> Any:
    """One TrainJob controller at a time, each with its own CRDs; Kubeflow's runtime applied unchanged."""
    if name == "trainer":
        started: Any = kubeflow_trainer.start(cluster, directory)
    else:
        for manifest in ("crd.yaml", "trainer-crds.yaml"):
            cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(DEPLOY / manifest))
        # One reconcile worker; with its report endpoint, as deploy/ runs it.
        started = deploy_operator(
            cluster, directory, "--workers=1", f"--report-address={cluster.host_ip}:{free_port()}"
        )
        # Ready once its TrainJob watch runs (it starts serving TrainJobs once it finds their CRD).
        _wait(lambda: "serving TrainJobs" in started.log.read_text(), 60)
    runtime = kubeflow_trainer.modules()[0] / "manifests" / "base" / "runtimes" / "torch_distributed.yaml"
    cluster.kubectl("apply", "-f", str(runtime))
    return started


def measure(trials: int = 3) -> dict[str, ControllerRun]:
    toolchain.build("build-kubeflow-trainer.sh")
    results = {controller: ControllerRun() for controller in CONTROLLERS}

    def prepare(cluster: Cluster) -> None:
        push_example_images(cluster)
        cluster.namespace(NAMESPACE)

    def trial(cluster: Cluster, controller: str) -> None:
        _clean_run(cluster, results[controller])
        _kill_run(cluster, results[controller])
        if controller == "torchjob":
            results[controller].inplace.append(inplace_node.trial(cluster, NAMESPACE, trainjob=True))

    crash = ("a crash loop", lambda cluster, controller: _crash_run(cluster, results[controller]))
    alternating.alternate("trainer-v2", prepare, CONTROLLERS, trials, _start, trial, crash)
    return results


def _median(values: list[float]) -> str:
    return f"{median(values):.1f} s" if values else "n/a"


def report(results: dict[str, ControllerRun]) -> str:
    trainer, ours = results["trainer"], results["torchjob"]

    def recovered(run: ControllerRun) -> str:
        done = [r for r in run.recovery if r is not None]
        return f"{_median(done)} ({len(done)}/{len(run.recovery)} started over)"

    firsts = [t["first_step"] for t in ours.inplace if t is not None]
    repaired = f"{_median(firsts)} ({len(firsts)}/{len(ours.inplace)} repaired in place, no restart)"
    rows = [
        "| The MNIST TrainJob, 2 nodes, one real node (medians) | Kubeflow Trainer v2.2.0 + JobSet v0.11.1 "
        "| torchjob |",
        "|---|---|---|",
        f"| apply → both Pods created | {_median(trainer.to_created)} | {_median(ours.to_created)} |",
        f"| apply → both Pods Running | {_median(trainer.to_running)} | {_median(ours.to_running)} |",
        f"| apply → Complete (1 epoch) | {_median(trainer.to_complete)} | {_median(ours.to_complete)} |",
        f"| rank 1's process SIGKILLed at step 20: outcome | {', '.join(trainer.kill_outcome)} "
        f"| {', '.join(ours.kill_outcome)} |",
        f"| kill → rank 1's first step after it | {recovered(trainer)} | {recovered(ours)} |",
        f"| apply → Complete, with the kill (3 epochs) | {_median(trainer.kill_total)} | {_median(ours.kill_total)} |",
        f"| the in-place MNIST TrainJob (3 nodes, a spare), rank 2's process SIGKILLed → first step after it "
        f"| no in-place repair | {repaired} |",
        f"| the script exits 2 at once on every node | {trainer.crash} | {ours.crash} |",
    ]
    return "\n".join(rows)


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print(report(measure(trials)))


if __name__ == "__main__":
    main()
