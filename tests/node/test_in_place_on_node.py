"""In-place repair on real Pods: a SIGKILLed or hung (SIGSTOPped) Worker's place goes to a warm spare Pod, an
evicted one hands it over before it goes, and the survivors' Pods are never recreated (the local twins are in
tests/integration/test_in_place_repair.py and test_mnist_example.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuberig import Cluster, toolchain
from tests.support.cluster_waits import event_messages, wait_beside_a_spare, wait_for_condition, wait_for_log
from tests.support.operator import OperatorProcess
from tests.support.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]
JOB = "mnist-inplace"


def _status(cluster: Cluster, namespace: str, name: str = JOB) -> dict[str, Any]:
    found = json.loads(cluster.kubectl("get", "pytorchjob", name, "-n", namespace, "-o", "json").stdout)
    return dict(found.get("status") or {})


def _uid(cluster: Cluster, namespace: str, pod: str) -> str:
    return cluster.kubectl("get", "pod", pod, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout


def _next_spare(cluster: Cluster, namespace: str, gone: str) -> str | None:
    """The name of a spare Pod of the job other than the one of uid ``gone``, and not being deleted."""
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    return next(
        (
            p["metadata"]["name"]
            for p in pods
            if p["metadata"]["name"].startswith(f"{JOB}-spare-")
            and p["metadata"]["uid"] != gone
            and not p["metadata"].get("deletionTimestamp")
        ),
        None,
    )


def _succeeded(cluster: Cluster, namespace: str, name: str) -> tuple[dict[str, Any], str]:
    """Once the job has finished, which it must have done without failing: its status, and its events' messages."""
    finished = wait_for_condition(cluster, namespace, name, {"Succeeded", "Failed"}, timeout=400)
    conditions = {c["type"]: c for c in finished["status"]["conditions"]}
    assert "Failed" not in conditions, conditions["Failed"]["message"]
    events = event_messages(cluster, namespace)
    return finished["status"], events


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(signal.SIGKILL, id="killed"),
        pytest.param(
            signal.SIGSTOP,
            id="hung",
            marks=pytest.mark.heavy(
                twin="tests/node/test_in_place_on_node.py::test_a_lost_worker_pod_is_replaced_by_a_warm_spare_and_the_survivors_pods_carry_on[killed]"
            ),
        ),
    ],
)
def test_a_lost_worker_pod_is_replaced_by_a_warm_spare_and_the_survivors_pods_carry_on(
    cluster: Cluster, node_operator: OperatorProcess, fault: signal.Signals
) -> None:
    namespace = cluster.namespace(f"inplace-{fault.name.lower()}")
    job = yaml.safe_load((ROOT / "examples" / "mnist" / "job-inplace.yaml").read_text())
    job["metadata"]["namespace"] = namespace
    if fault is signal.SIGSTOP:  # a hang is found at the progress deadline: the one Pod that stopped reporting
        # 60 s: the deadline also bounds start-up (four Pods importing torch on two busy cores took over 30 s in CI).
        job["metadata"]["annotations"]["torchjob.io/progress-deadline-seconds"] = "60"
    cluster.apply(job)  # the example's 8 epochs: the fault comes in epoch 2, well before the end
    wait_beside_a_spare(cluster, namespace, JOB, f"{JOB}-worker-1", "epoch: 2/")
    survivors = {pod: _uid(cluster, namespace, pod) for pod in (f"{JOB}-master-0", f"{JOB}-worker-0")}
    for pid in cluster.container_pids(namespace, f"{JOB}-worker-1"):
        os.kill(pid, fault)
    status, events = _succeeded(cluster, namespace, JOB)
    if fault is signal.SIGSTOP:
        assert f"worker-1 stopped responding (hung); {JOB}-spare-0-0 takes its place" in events, events[-3000:]
    assert f"{JOB}-spare-0-0 takes its place in the running group" in events, events[-3000:]
    assert (status["attempt"], status["restartCount"], status["repairs"]) == (0, 0, 1), status["attempts"]
    assert status["trainerStatus"]["progressPercentage"] == 100  # the in-place example reports its progress too
    # The survivors' Pods are the same Pods: never deleted, never recreated.
    assert {pod: _uid(cluster, namespace, pod) for pod in survivors} == survivors
    # The spare Pod is worker-1 now (its labels; Pods cannot be renamed), and its Service selects it.
    worker_1 = cluster.kubectl(
        "get",
        "pods",
        "-n",
        namespace,
        "-o",
        "name",
        "-l",
        "training.kubeflow.org/replica-type=worker,training.kubeflow.org/replica-index=1",
    ).stdout.split()
    assert worker_1 == [f"pod/{JOB}-spare-0-0"], worker_1
    master_log = cluster.kubectl("logs", "-n", namespace, f"{JOB}-master-0").stdout
    assert "group repaired in place (generation 1, 3 ranks" in master_log, master_log[-3000:]
    assert float(master_log.split("test accuracy=")[1].split()[0]) >= 0.90
    spare_log = cluster.kubectl("logs", "-n", namespace, f"{JOB}-spare-0-0").stdout
    assert f"torchjob: spare {JOB}-spare-0-0 joins as worker-1 (rank 2 of 3)" in spare_log, spare_log[-2000:]


def _evict(cluster: Cluster, namespace: str, pod: str, followed: Path) -> Callable[[], str]:
    """What `kubectl drain` does to one Pod: the Eviction API (DisruptionTarget, then a graceful delete).
    Returns what the Pod's trainer said of its notice (its log is followed into ``followed`` until it goes),
    to show when an assertion fails."""
    with followed.open("wb") as into:
        subprocess.Popen(
            [str(toolchain.kubectl()), "logs", "-f", "-n", namespace, pod],
            stdout=into,
            stderr=subprocess.STDOUT,
            env=cluster.env(),
        )
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}}
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
    cluster.kubectl("create", "--raw", path, "-f", "-", input=json.dumps(eviction))

    def said() -> str:
        lines = followed.read_text(errors="replace").splitlines()
        return f"\n{pod} said:\n" + "\n".join([line for line in lines if "torchjob" in line] + lines[-5:])

    return said


def _grown_back(cluster: Cluster, namespace: str, name: str, said: Callable[[], str]) -> tuple[str, str]:
    """Until the elastic job's worker-0 has logged its progress at 3 ranks' batch after its group re-formed at 3
    (generation 2) and the operator has said the spare joined: worker-0's log and the events' messages. Fails
    at once if the job ends first (its long run is not what is tested) or is restarted."""
    deadline = time.monotonic() + 300
    while True:
        log = cluster.kubectl("logs", "-n", namespace, f"{name}-worker-0", check=False).stdout
        _, grown, after = log.partition("group re-formed in place (generation 2, 3 ranks")
        if grown and "mini-batch size: 32" in after:
            events = event_messages(cluster, namespace)
            if f"{name}-spare-0-0 joins the running group" in events:
                return log, events
        status = _status(cluster, namespace, name)
        ended = [c["type"] for c in status.get("conditions") or [] if c["type"] in ("Succeeded", "Failed")]
        if ended or status.get("restartCount") or time.monotonic() > deadline:
            told = event_messages(cluster, namespace)
            pytest.fail(f"never trained at 3 again ({ended}):\n{told[-3000:]}\n{log[-3000:]}{said()}")
        time.sleep(1)


@pytest.mark.parametrize("fault", ["killed", "evicted"])
def test_an_elastic_group_on_pods_shrinks_at_once_and_grows_back_when_the_spare_pod_is_warm(
    cluster: Cluster, node_operator: OperatorProcess, fault: str, tmp_path: Path
) -> None:
    """The elastic in-place MNIST job (3 Workers, at least 2, no idle spare): worker-1's trainer is SIGKILLed, or
    its Pod evicted; the two other Pods carry on as a group of 2 at once (an evicted member leaves at a step
    boundary: no step fails), a spare Pod started for the place joins as worker-1, and the group trains at 3 again
    (a progress line at 3 ranks' batch after the re-form). No Pod but the lost one is recreated, and nothing
    restarts. The job is long, and deleted then: its end is not what is tested (the other tests here train to an
    accuracy), and the spare's cold start must come well before it under any load."""
    name = "mnist-elastic-inplace"
    namespace = cluster.namespace(f"inplace-elastic-{fault}")
    job = yaml.safe_load((ROOT / "examples" / "mnist" / "job-elastic-inplace.yaml").read_text())
    job["metadata"]["namespace"] = namespace
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = ["--epochs", "40"]
    cluster.apply(job)
    try:
        wait_for_log(cluster, namespace, f"{name}-worker-1", "epoch: 2/", timeout=300)
        survivors = {pod: _uid(cluster, namespace, pod) for pod in (f"{name}-worker-0", f"{name}-worker-2")}
        said: Callable[[], str] = str
        if fault == "evicted":
            said = _evict(cluster, namespace, f"{name}-worker-1", tmp_path / "worker-1.log")
        else:
            for pid in cluster.container_pids(namespace, f"{name}-worker-1"):
                os.kill(pid, signal.SIGKILL)
        log, events = _grown_back(cluster, namespace, name, said)
        if fault == "evicted":
            assert "worker-1 is being evicted: it leaves the group at its next step" in events, events[-3000:]
        else:
            assert "the group carries on in place with 2 Worker(s)" in events, events[-3000:]
        status = _status(cluster, namespace, name)
        assert (status["attempt"], status["restartCount"], status["membershipChanges"]) == (0, 0, 2), status
        assert {pod: _uid(cluster, namespace, pod) for pod in survivors} == survivors
        shrunk = "re-formed" if fault == "evicted" else "repaired"
        assert f"group {shrunk} in place (generation 1, 2 ranks" in log, log[-3000:] + said()
        if fault == "evicted":
            assert "group repaired in place" not in log, log[-3000:] + said()  # no step failed
        spare_log = cluster.kubectl("logs", "-n", namespace, f"{name}-spare-0-0").stdout
        assert f"spare {name}-spare-0-0 joins as worker-1 (rank 1 of 3)" in spare_log, spare_log[-2000:]
    finally:
        cluster.kubectl("delete", "pytorchjob", name, "-n", namespace, "--wait=false", check=False)


def test_a_worker_pod_evicted_through_the_eviction_api_hands_its_place_to_the_spare_before_it_goes(
    cluster: Cluster, node_operator: OperatorProcess, tmp_path: Path
) -> None:
    """What `kubectl drain` and a spot notice's handler do to one Pod: the Eviction API marks it
    DisruptionTarget and deletes it gracefully (SIGTERM, then its grace period). worker-1 trains on, the operator
    gives its place to the warm spare, and the group re-forms at a step boundary: no step fails, nothing
    restarts, the survivors' Pods carry on."""
    namespace = cluster.namespace("inplace-evicted")
    job = yaml.safe_load((ROOT / "examples" / "mnist" / "job-inplace.yaml").read_text())
    job["metadata"]["namespace"] = namespace
    cluster.apply(job)  # the example's 8 epochs: the fault comes in epoch 2, well before the end
    wait_beside_a_spare(cluster, namespace, JOB, f"{JOB}-worker-1", "epoch: 2/")
    survivors = {pod: _uid(cluster, namespace, pod) for pod in (f"{JOB}-master-0", f"{JOB}-worker-0")}
    said = _evict(cluster, namespace, f"{JOB}-worker-1", tmp_path / "worker-1.log")
    status, events = _succeeded(cluster, namespace, JOB)
    assert f"worker-1 is being evicted; {JOB}-spare-0-0 takes its place in the running group" in events, events[-3000:]
    assert (status["attempt"], status["restartCount"], status["repairs"]) == (0, 0, 1), status["attempts"]
    assert {pod: _uid(cluster, namespace, pod) for pod in survivors} == survivors
    master_log = cluster.kubectl("logs", "-n", namespace, f"{JOB}-master-0").stdout
    # Re-formed at a step boundary, never repaired after a failed step.
    assert "group re-formed in place (generation 1, 3 ranks" in master_log, master_log[-3000:] + said()
    assert "group repaired in place" not in master_log, master_log[-3000:] + said()
    assert float(master_log.split("test accuracy=")[1].split()[0]) >= 0.90
    spare_log = cluster.kubectl("logs", "-n", namespace, f"{JOB}-spare-0-0").stdout
    assert f"torchjob: spare {JOB}-spare-0-0 joins as worker-1 (rank 2 of 3)" in spare_log, spare_log[-2000:]


def test_a_worker_pod_lost_while_the_next_spare_pod_still_starts_waits_for_it_and_is_repaired_in_place(
    cluster: Cluster, node_operator: OperatorProcess
) -> None:
    """The spare Pod's trainer is SIGKILLed, and worker-1's as soon as the operator has made the next spare Pod,
    still starting. The survivors hold the group's state in memory: the operator waits for that spare to warm
    and gives it the place (no group restart from the start), the survivors' Pods carry on."""
    namespace = cluster.namespace("inplace-spare-awaited")
    job = yaml.safe_load((ROOT / "examples" / "mnist" / "job-inplace.yaml").read_text())
    job["metadata"]["namespace"] = namespace
    cluster.apply(job)
    wait_beside_a_spare(cluster, namespace, JOB, f"{JOB}-worker-1", "epoch: 2/")
    survivors = {pod: _uid(cluster, namespace, pod) for pod in (f"{JOB}-master-0", f"{JOB}-worker-0")}
    killed = _uid(cluster, namespace, f"{JOB}-spare-0-0")
    for pid in cluster.container_pids(namespace, f"{JOB}-spare-0-0"):
        os.kill(pid, signal.SIGKILL)
    spare = wait_until(lambda: _next_spare(cluster, namespace, killed), 120, "the operator to make the next spare Pod")
    for pid in cluster.container_pids(namespace, f"{JOB}-worker-1"):
        os.kill(pid, signal.SIGKILL)
    status, events = _succeeded(cluster, namespace, JOB)
    assert "no spare is ready to take its place: the group waits for one" in events, events[-3000:]
    assert f"{spare} takes its place in the running group" in events, events[-3000:]
    assert (status["attempt"], status["restartCount"], status["repairs"]) == (0, 0, 1), status["attempts"]
    assert {pod: _uid(cluster, namespace, pod) for pod in survivors} == survivors
    master_log = cluster.kubectl("logs", "-n", namespace, f"{JOB}-master-0").stdout
    assert "group repaired in place (generation 1, 3 ranks" in master_log, master_log[-3000:]
    assert float(master_log.split("test accuracy=")[1].split()[0]) >= 0.90
