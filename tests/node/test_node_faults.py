"""Faults as a real kubelet and the Eviction API deliver them: the operator must read them from Pod status."""

from __future__ import annotations

import json
import time

from kuberig import Cluster
from tests.support.cluster_waits import reported_step, wait_for_condition, wait_for_log
from tests.support.images import KUBEFLOW_MNIST
from tests.support.operator import OperatorProcess
from tests.support.waits import wait_until


def _job(
    name: str, namespace: str, epochs: int, annotations: dict[str, str] | None = None, **run_policy: object
) -> dict:  # type: ignore[type-arg]
    container = {"name": "pytorch", "image": KUBEFLOW_MNIST, "command": ["python3", "/opt/pytorch-mnist/mnist.py"]}
    container["args"] = [f"--epochs={epochs}", "--log-interval=5"]
    template = {"spec": {"containers": [container]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
            },
        },
    }


def test_an_eviction_restarts_the_group_without_counting_against_backoff_limit(
    cluster: Cluster, node_operator: OperatorProcess
) -> None:
    """backoffLimit 0: one counted failure would end the job. An eviction through the Eviction API (what
    `kubectl drain` and the cluster autoscaler use) is the platform's doing, so the group restarts."""
    namespace = cluster.namespace("evict")
    # What is judged is the eviction, and with backoffLimit 0 any other verdict ends the job. Under CI's load (two
    # test workers on two cores) a freshly started replica once fell silent for 10 s, the default liveness deadline,
    # while its peer beat (CI of 7051d11): a wider deadline keeps this test to its own question. The liveness rule
    # itself is tested in tests/integration/test_progress.py and tests/node/test_progress_on_node.py.
    liveness = {"torchjob.io/liveness-deadline-seconds": "60"}
    cluster.apply(_job("evicted", namespace, epochs=6, annotations=liveness, backoffLimit=0))
    wait_for_log(cluster, namespace, "evicted-worker-0", "Rank 1: epoch: 1/6, batch: 5/", timeout=240)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "evicted-worker-0"}}
    cluster.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{namespace}/pods/evicted-worker-0/eviction",
        "-f",
        "-",
        input=json.dumps(eviction),
    )
    job = wait_for_condition(cluster, namespace, "evicted", {"Succeeded", "Failed"}, timeout=400)
    conditions = {c["type"]: c for c in job["status"]["conditions"]}
    assert "Failed" not in conditions, conditions["Failed"]["message"]
    outcome = job["status"]["attempts"][0]["outcome"]
    assert "worker-0 was Evicted" in outcome, outcome
    assert job["status"]["attempt"] == 1


def test_a_lost_node_is_named_in_the_status_and_the_job_carries_on_when_it_returns(
    cluster: Cluster, node_operator: OperatorProcess
) -> None:
    """kubelet stops: the Node goes NotReady and its Pods not Ready. With one node there is nowhere to go, and
    Kubernetes evicts nothing when every node of a zone is down, so the status must say what the job waits on.
    The script never imports torchjob, yet it reports its steps (the operator's user-site injection,
    autoreport_boot.py): it keeps beating while only the kubelet is gone, so nothing is declared lost."""
    namespace = cluster.namespace("lost-node")
    # Sixty epochs (over a minute on a quiet machine): the job must still train when the status is read with the
    # kubelet gone, and after it returns; exited processes, which no kubelet reports, would look silent.
    cluster.apply(_job("stranded", namespace, epochs=60))
    wait_for_log(cluster, namespace, "stranded-worker-0", "Rank 1: epoch: 1/60, batch: 5/", timeout=240)
    wait_until(
        lambda: reported_step(cluster, namespace, "stranded") > 0,
        60,
        "the plain script's steps at the operator",
        every=1,
    )
    containers = _container_ids(cluster, namespace)
    kubelet = cluster.kubelet_nodes()[0].process_name("kubelet")
    argv = cluster.stop_process(kubelet)
    try:
        deadline = time.monotonic() + 120
        while True:
            running = wait_for_condition(cluster, namespace, "stranded", {"Running"}, timeout=30)
            message = next(c["message"] for c in running["status"]["conditions"] if c["type"] == "Running")
            if f"node {cluster.nodes[0].name} is not ready" in message:
                break
            assert time.monotonic() < deadline, f"the status never named the lost node: {message}"
            time.sleep(1)
        assert "worker-0: node" in message and "master-0: node" in message, message
    finally:
        cluster.start_process(kubelet, argv)
    # The containers never stopped: once kubelet reports again, the lost node is named no more and the same
    # containers of the same attempt train on. (Not to the end: the rest of the sixty epochs proves nothing more.)
    deadline = time.monotonic() + 180
    while True:
        job = cluster.kubectl_json("get", "pytorchjob", "stranded", "-n", namespace)
        conditions = {c["type"]: c for c in job["status"]["conditions"]}
        assert "Failed" not in conditions and "Succeeded" not in conditions, conditions
        running = conditions.get("Running", {})
        if running.get("status") == "True" and "is not ready" not in running.get("message", ""):
            break
        assert time.monotonic() < deadline, f"the lost node is still named after it returned: {running}"
        time.sleep(1)
    back_at = max(reported_step(cluster, namespace, "stranded"), 0)
    wait_until(
        lambda: reported_step(cluster, namespace, "stranded") > back_at,
        120,
        f"a step reported after step {back_at}, the node back",
        every=1,
    )
    assert _container_ids(cluster, namespace) == containers
    job = cluster.kubectl_json("get", "pytorchjob", "stranded", "-n", namespace)
    assert job["status"].get("restartCount", 0) == 0
    assert len(job["status"]["attempts"]) == 1
    cluster.kubectl("delete", "pytorchjob", "stranded", "-n", namespace, "--wait=true", timeout=120)


def _container_ids(cluster: Cluster, namespace: str) -> dict[str, tuple[str, int]]:
    """Each Pod's trainer container: its id and restart count, as its kubelet last reported them."""
    pods = cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
    return {
        pod["metadata"]["name"]: (status["containerID"], status["restartCount"])
        for pod in pods
        for status in pod["status"].get("containerStatuses", [])
    }
