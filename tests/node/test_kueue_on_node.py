"""Kueue queues the TrainJobs torchjob runs, on the real node: a real Kueue (sigs.k8s.io/kueue, built from the Go
module proxy, its CRDs and webhooks unchanged) with a ResourceFlavor, a ClusterQueue and a LocalQueue. A TrainJob
labelled for the queue is suspended by Kueue's own webhook, waits while the queue's quota is short of it, is
admitted once it fits, and runs to Complete under torchjob with Kueue's admission (the flavor's node selector,
its podset label) on its Pods; Kueue then counts its Workload finished."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuberig import Cluster
from kuberig.addons import kueue
from tests.support.operator import OperatorProcess
from tests.support.paths import MNIST
from tests.support.trainer import TORCH_DISTRIBUTED
from tests.support.waits import wait_until

QUEUE = "team"
HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture(scope="module")
def queue(cluster: Cluster, node_operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    started = kueue.start(cluster, tmp_path_factory.mktemp("kueue"))
    yield
    started.stop()


def cluster_queue(cpu: str, node: str) -> list[dict[str, Any]]:
    group = "kueue.x-k8s.io/v1beta2"
    flavor = {"apiVersion": group, "kind": "ResourceFlavor", "metadata": {"name": "rig-node"}}
    flavor["spec"] = {"nodeLabels": {HOSTNAME: node}}
    quota = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "4Gi"}]
    resources = {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "rig-node", "resources": quota}]}
    queue = {"apiVersion": group, "kind": "ClusterQueue", "metadata": {"name": "trainers"}}
    queue["spec"] = {"namespaceSelector": {}, "resourceGroups": [resources]}
    return [flavor, queue]


def test_a_queued_trainjob_waits_for_kueue_and_runs_once_admitted(
    cluster: Cluster, queue: None, tmp_path: Path
) -> None:
    namespace = cluster.namespace("kueue")
    node = cluster.kubelet_nodes()[0].name
    hostname = cluster.kubectl_json("get", "node", node)["metadata"]["labels"][HOSTNAME]
    cluster.apply(TORCH_DISTRIBUTED)
    for document in cluster_queue("500m", hostname):  # short of the job's 2 x 400m
        cluster.apply(document)
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": QUEUE}}
    cluster.apply({**local, "spec": {"clusterQueue": "trainers"}}, namespace)
    job = yaml.safe_load((MNIST / "trainjob.yaml").read_text())
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
    job["spec"]["trainer"].update(numNodes=2, args=["--epochs", "1", "--batch-size", "32"])
    job["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "400m", "memory": "256Mi"}}
    cluster.apply(job, namespace)
    name = job["metadata"]["name"]

    def trainjob() -> dict[str, Any]:
        return dict(cluster.kubectl_json("get", "trainjob", name, "-n", namespace))

    def workload() -> dict[str, Any] | None:
        items = cluster.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", namespace)["items"]
        return items[0] if items else None

    def condition(found: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
        conditions = ((found or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == kind), None)

    # Kueue's webhook suspended it; its Workload waits for quota, and torchjob starts nothing meanwhile.
    assert trainjob()["spec"]["suspend"] is True
    pending = wait_until(lambda: condition(workload(), "QuotaReserved"), 120, "the Workload pending on quota")
    assert (pending["status"], pending["reason"]) == ("False", "Pending"), pending
    assert "insufficient" in pending["message"].lower(), pending
    pytorchjob = cluster.kubectl_json("get", "pytorchjob", name, "-n", namespace)
    assert pytorchjob["spec"]["runPolicy"]["suspend"] is True
    assert not cluster.kubectl_json("get", "pods", "-n", namespace)["items"]

    for document in cluster_queue("2", hostname):  # now it fits: Kueue admits it and resumes it
        cluster.apply(document)
    wait_until(lambda: trainjob()["spec"]["suspend"] is False, 120, "Kueue to admit and resume the TrainJob")
    admitted = condition(workload(), "Admitted")
    assert admitted is not None and admitted["status"] == "True", workload()
    pods = wait_until(lambda: cluster.kubectl_json("get", "pods", "-n", namespace)["items"], 120, "the node Pods")
    assert all(pod["spec"].get("nodeSelector", {}).get(HOSTNAME) == hostname for pod in pods)  # the flavor's
    assert all(pod["metadata"]["labels"].get("kueue.x-k8s.io/podset") == "node" for pod in pods)

    complete = wait_until(lambda: condition(trainjob(), "Complete"), 300, "the TrainJob to complete")
    assert complete["status"] == "True", json.dumps(trainjob().get("status"))
    finished = wait_until(lambda: condition(workload(), "Finished"), 120, "Kueue to see the Workload finished")
    assert finished["status"] == "True", finished
    logs = cluster.kubectl("logs", "-n", namespace, f"{name}-master-0", "-c", "node").stdout
    assert "test accuracy=" in logs, logs[-2000:]
