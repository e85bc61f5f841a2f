"""The same TrainJob under Kubeflow Trainer v2 (its controller manager and the JobSet controller it drives) and
under torchjob's operator, on the same real node, in the same run: the measured rows of the TrainJob guide's
"what torchjob adds to Trainer v2".

One real node (kuberig); the controllers take turns, trials alternating. Kubeflow's ``torch-distributed``
runtime as Trainer's module ships it; the TrainJob is ``examples/mnist/trainjob.yaml`` on 2 nodes (the plain
script under torchrun, no checkpoint). Each trial:
- a clean run: ``kubectl apply`` → both Pods Running → Complete;
- the same job over three epochs with rank 1's training process SIGKILLed from the host after 20 steps: the
  outcome, kill → rank 1's first step after it (the script starts over), and apply → the end;
- torchjob only: the in-place MNIST job as a TrainJob (three nodes and a spare, ``bench.in_place_node``), rank 2's
  process SIGKILLed in epoch 2 (Trainer has no in-place repair);
and once per controller, a script that fails at once on every node (exit 2): what the TrainJob says, and when.

torchjob's operator runs in the cluster as users deploy it (two replicas, leader election); Trainer's controller
manager and JobSet's beside the cluster, as kuberig runs them. ``python -m bench --only trainer-v2``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import yaml
from tests.support.images import push_example_images
from tests.support.paths import MNIST

from bench import alternating, in_place_node
from bench.cluster_kit import DeployedOperator, Stoppable, container_restarts, logged_steps, wait
from bench.records import Run
from kuberig import Cluster, toolchain
from kuberig.addons import kubeflow_trainer

CONTROLLERS = ("torchjob", "trainer")
NAMESPACE = "bench"
JOB = "mnist-trainjob"
CRASH = "echo 'train.py: error: --data: no such directory' >&2; exit 2"
CRASH_WAIT = 600  # seconds a crash-looping job is watched for an end: long enough for six restarts backed off


def _trainjob(epochs: int, command: list[str] | None = None) -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load((MNIST / "trainjob.yaml").read_text())
    trainer = job["spec"]["trainer"]
    trainer.update(numNodes=2, args=["--epochs", str(epochs), "--batch-size", "32", "--log-interval", "5"])
    if command is not None:
        trainer.update(command=command, args=[])
    return job


def _pods(cluster: Cluster) -> list[dict[str, Any]]:
    selector = f"jobset.sigs.k8s.io/jobset-name={JOB}"  # both controllers' Pods carry JobSet's labels
    items: list[dict[str, Any]] = cluster.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _rank1(cluster: Cluster) -> dict[str, Any] | None:
    index = "batch.kubernetes.io/job-completion-index"
    return next((p for p in _pods(cluster) if p["metadata"]["labels"].get(index) == "1"), None)


def _rank1_log(cluster: Cluster) -> str:
    pod = _rank1(cluster)
    return "" if pod is None else cluster.kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"], check=False).stdout


def _ended(cluster: Cluster) -> tuple[str, str] | None:
    found = cluster.kubectl_json("get", "trainjob", JOB, "-n", NAMESPACE)
    for condition in found.get("status", {}).get("conditions") or []:
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return condition["type"], condition.get("message", "")
    return None


def _clean(cluster: Cluster) -> None:
    cluster.kubectl("delete", "trainjob", JOB, "-n", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=120)
    wait(lambda: not _pods(cluster), 120)


def _clean_run(cluster: Cluster, run: Run, side: str) -> None:
    started = time.monotonic()
    cluster.apply(_trainjob(epochs=1), NAMESPACE)
    created = wait(lambda: len(_pods(cluster)) == 2, 300, poll=0.1)
    running = wait(
        lambda: len(_pods(cluster)) == 2 and all(p["status"].get("phase") == "Running" for p in _pods(cluster)), 300
    )
    wait(lambda: _ended(cluster) is not None, 300)
    ended = _ended(cluster)
    run.keep(f"{side} created", created)
    run.keep(f"{side} running", None if created is None or running is None else created + running)
    run.keep(f"{side} complete", time.monotonic() - started if ended and ended[0] == "Complete" else None)
    _clean(cluster)


def _kill_run(cluster: Cluster, run: Run, side: str) -> str:
    """Rank 1's training process SIGKILLed at step 20; the outcome, as the TrainJob's end says it."""
    started = time.monotonic()
    cluster.apply(_trainjob(epochs=3), NAMESPACE)
    if wait(lambda: logged_steps(_rank1_log(cluster)) >= 20, 300) is None:
        run.keep(f"{side} kill first step", None)
        run.keep(f"{side} kill complete", None)
        _clean(cluster)
        return "never reached step 20"
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
        return fresh and 0 < logged_steps(_rank1_log(cluster)) < 20

    took = wait(started_over, 240, poll=0.25)
    run.keep(f"{side} kill first step", None if took is None else time.monotonic() - killed_at)
    wait(lambda: _ended(cluster) is not None, 400)
    ended = _ended(cluster)
    run.keep(f"{side} kill complete", time.monotonic() - started if ended and ended[0] == "Complete" else None)
    _clean(cluster)
    return ended[0] if ended else "still running after 400 s"


def _crash_run(cluster: Cluster, run: Run, side: str) -> None:
    started = time.monotonic()
    cluster.apply(_trainjob(epochs=1, command=["sh", "-c", CRASH]), NAMESPACE)
    took = wait(lambda: _ended(cluster) is not None, CRASH_WAIT, poll=0.5)
    ended = _ended(cluster)
    restarts = container_restarts(_pods(cluster))
    if ended is None or took is None:
        text = f"no end after {CRASH_WAIT} s ({restarts} container restarts so far)"
    else:
        message = ended[1].replace("\n", " ").replace("|", "/")
        text = f"`{ended[0]}` after {time.monotonic() - started:.0f} s: {message[:300] or '(no message)'}"
    run.describe(f"{side} crash", text)
    _clean(cluster)


def _start(cluster: Cluster, name: str, directory: Path) -> Stoppable:
    """One TrainJob controller at a time, each with its own CRDs; Kubeflow's runtime applied unchanged."""
    # torchjob's deploy/ applies the CRDs of both kinds it serves.
    started: Stoppable = (
        kubeflow_trainer.start(cluster, directory) if name == "trainer" else DeployedOperator(cluster, directory)
    )
    runtime = kubeflow_trainer.modules()[0] / "manifests" / "base" / "runtimes" / "torch_distributed.yaml"
    cluster.kubectl("apply", "-f", str(runtime))
    return started


def record(run: Run, trials: int) -> None:
    toolchain.build("build-kubeflow-trainer.sh")
    outcomes: dict[str, list[str]] = {side: [] for side in CONTROLLERS}

    def prepare(cluster: Cluster) -> None:
        push_example_images(cluster)
        cluster.namespace(NAMESPACE)

    def trial(cluster: Cluster, side: str) -> None:
        _clean_run(cluster, run, side)
        outcomes[side].append(_kill_run(cluster, run, side))
        if side == "torchjob":
            repaired = in_place_node.trial(cluster, NAMESPACE, trainjob=True)
            run.keep("torchjob in place first step", None if repaired is None else repaired["first_step"])

    crash = ("a crash loop", lambda cluster, side: _crash_run(cluster, run, side))
    alternating.alternate("trainer-v2", prepare, CONTROLLERS, trials, _start, trial, crash)
    for side, found in outcomes.items():
        run.describe(f"{side} kill outcome", ", ".join(found))
