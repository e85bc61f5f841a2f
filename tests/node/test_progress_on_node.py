"""What torchjob knows of a job's training, on real Pods: reports travel from the Pods to the operator.

A training process frozen by SIGSTOP (no crash, no exit: its peers wait in gloo for 30 minutes) is found
within seconds from the reports the Pods send (it stopped beating, the other kept beating), and named; the
first attempt's output survives the deletion of its Pods. The local twins are in tests/integration/test_progress.py.
"""

from __future__ import annotations

import copy
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from kuberig import Cluster
from tests.support.cli import run_cli_on_cluster
from tests.support.cluster_waits import reported_step, wait_for_condition
from tests.support.images import TEST_SCRIPTS
from tests.support.load import cpu_hogs
from tests.support.operator import OperatorProcess
from tests.support.waits import wait_until

# It bounds a Pod's start-up too: 30 s was seen to pass before the first report on a loaded node (every attempt
# was then judged hung at start-up), so 60, as the other real-node hang tests use.
DEADLINE_SECONDS = 60


def _job(name: str, namespace: str) -> dict[str, Any]:
    container = {
        "name": "pytorch",
        "image": TEST_SCRIPTS,
        "command": ["python3", "hang_train.py", "--first-attempt-steps", "100000", "--steps", "20"],
    }
    template = {"spec": {"containers": [container], "terminationGracePeriodSeconds": 2}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"torchjob.io/progress-deadline-seconds": str(DEADLINE_SECONDS)},
        },
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
            },
        },
    }


def test_a_sigstopped_pod_is_named_as_hung_and_its_attempts_output_is_kept(
    cluster: Cluster, node_operator: OperatorProcess, tmp_path: Path
) -> None:
    namespace = cluster.namespace("frozen")
    cluster.apply(_job("frozen", namespace))
    wait_until(  # the Pods' reports reach the operator
        lambda: reported_step(cluster, namespace, "frozen") >= 5,
        240,
        "step 5 reported",
        every=1,
        detail=lambda: cluster.kubectl("get", "pods", "-n", namespace, check=False).stdout,
    )
    for pid in cluster.container_pids(namespace, "frozen-worker-0"):  # from the host: frozen, not ended
        os.kill(pid, signal.SIGSTOP)
    job = wait_for_condition(cluster, namespace, "frozen", {"Succeeded", "Failed"}, timeout=300)
    conditions = {c["type"]: c for c in job["status"]["conditions"]}
    assert "Failed" not in conditions, conditions["Failed"]["message"]
    outcome = job["status"]["attempts"][0]["outcome"]
    assert outcome.startswith("Hung: worker-0 stopped beating while the others beat (silent for "), outcome
    assert "worker-0" in outcome and "silent for " in outcome, outcome
    assert job["status"]["restartCount"] == 1 and job["status"]["attempt"] == 1
    assert job["status"]["trainerStatus"]["progressPercentage"] == 100
    # The first attempt's Pods are gone; their output was kept.
    first = run_cli_on_cluster(cluster, "logs", "--cluster", "frozen", "-n", namespace, "--attempt", "0", home=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "[master-0] rank 0: attempt 0 started" in first.stdout, first.stdout[-2000:]
    assert "[worker-0] rank 1: attempt 0 started" in first.stdout
    one = run_cli_on_cluster(
        cluster, "logs", "--cluster", "frozen", "-n", namespace, "--attempt", "1", "--replica=worker-0", home=tmp_path
    )
    assert one.returncode == 0 and "rank 1: attempt 1 started" in one.stdout and "rank 1: done" in one.stdout, one
    missing = run_cli_on_cluster(
        cluster, "logs", "--cluster", "frozen", "-n", namespace, "--attempt", "7", home=tmp_path
    )
    assert missing.returncode != 0 and "no Pods of attempt 7 and no output kept" in missing.stderr, missing
    assert len(missing.stderr.strip().splitlines()) == 1


@pytest.mark.heavy(
    twin="tests/integration/test_progress.py::test_a_deadlock_in_a_plain_script_is_found_by_a_learned_deadline_with_no_annotation"
)
def test_a_deadlock_in_a_plain_script_in_pods_is_found_by_a_learned_deadline(
    cluster: Cluster, node_operator: OperatorProcess
) -> None:
    """No annotation, a script that never imports torchjob, one rank stopped between collectives (alive) and
    the other waiting in the next all-reduce, a CPU hog beside the node: the progress deadline learned from the
    steps the Pods reported ends the attempt as Hung, the learned value is kept in the job's status, and the
    next attempt, under the same load, is not falsely judged."""
    namespace = cluster.namespace("deadlock")
    job = _job("deadlock", namespace)
    del job["metadata"]["annotations"]
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["command"] = ["python3", "plain_deadlock.py"]
    with cpu_hogs(1):
        cluster.apply(job)
        found = wait_for_condition(cluster, namespace, "deadlock", {"Succeeded", "Failed"}, timeout=300)
    conditions = {c["type"]: c for c in found["status"]["conditions"]}
    assert "Failed" not in conditions, conditions["Failed"]["message"]
    learned = found["status"]["learnedDeadlines"]
    outcome = found["status"]["attempts"][0]["outcome"]
    expected = f"Hung: no progress for {learned['progressSeconds']}s (progress deadline: learned, 5x the longest"
    assert outcome.startswith(expected) and "stopped at step 30" in outcome, outcome
    assert (found["status"]["attempt"], found["status"]["restartCount"]) == (1, 1)


def test_a_process_that_finished_is_not_hung_while_its_pod_still_runs(
    cluster: Cluster, node_operator: OperatorProcess
) -> None:
    """worker-0's trainer finishes and says so in its last report, but its Pod stays Running (a second container
    here; a loaded node's kubelet reports an exit seconds late alike) while master-0 stays alive after training,
    beating: worker-0's silence is not a hang. Under the default liveness deadline, with backoffLimit 0."""
    namespace = cluster.namespace("finishing")
    job = _job("finishing", namespace)
    del job["metadata"]["annotations"]
    job["spec"]["runPolicy"] = {"backoffLimit": 0}
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["Worker"]["template"] = copy.deepcopy(specs["Worker"]["template"])
    plain = ["python3", "plain_deadlock.py", "--steps", "20", "--stop-rank", "-1"]
    # Alive 15 s after training: past the liveness deadline (10 s), within the progress deadline's floor (20 s).
    lingers = ["--linger-rank", "0", "--linger-seconds", "15"]
    specs["Master"]["template"]["spec"]["containers"][0]["command"] = [*plain, *lingers]
    worker = specs["Worker"]["template"]["spec"]["containers"]
    worker[0]["command"] = plain
    worker.append({"name": "after", "image": TEST_SCRIPTS, "command": ["sleep", "90"]})
    cluster.apply(job)
    found = wait_for_condition(cluster, namespace, "finishing", {"Succeeded", "Failed"}, timeout=300)
    conditions = {c["type"]: c for c in found["status"]["conditions"]}
    assert "Failed" not in conditions, conditions["Failed"]["message"]
    assert (found["status"]["attempt"], found["status"]["restartCount"]) == (0, 0), found["status"]["attempts"]
