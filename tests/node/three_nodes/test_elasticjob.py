"""Seed 004's scenario as its users run it: TorchElastic's ElasticJob (examples/mnist/elasticjob.yaml) with its etcd
in the cluster (examples/mnist/etcd.yaml) on three real nodes, the checkpoints on storage every node reaches. A
Worker's node vanishes mid-training, as a spot VM does: the job carries on within min/max, grows back to three
when a replacement is warm, and succeeds with no restart."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from kuberig import Cluster
from kuberig.node import kubelet
from tests.node.three_nodes import support
from tests.support import operator_pods
from tests.support.cluster_waits import event_messages, wait_for_a_checkpoint, wait_for_pod_phase
from tests.support.paths import MNIST


@pytest.mark.heavy(
    twin="tests/node/test_elastic_on_node.py::test_the_elasticjob_example_meets_at_its_etcd_in_the_cluster_loses_a_pod_and_carries_on"
)
@pytest.mark.timeout(1200)  # the cluster's making, a checkpoint, thirty epochs with a node lost
def test_an_elasticjob_carries_on_when_a_workers_node_vanishes_and_grows_back(three_nodes: Cluster) -> None:
    cluster = three_nodes
    support.all_nodes_ready(cluster, timeout=180)
    namespace = cluster.namespace("elasticjob-spot")
    cluster.kubectl("apply", "-n", namespace, "-f", str(MNIST / "etcd.yaml"))
    wait_for_pod_phase(cluster, namespace, "etcd", "Running", timeout=120)
    data = cluster.claim(namespace, "data")
    job: dict[str, Any] = yaml.safe_load((MNIST / "elasticjob.yaml").read_text())
    pod = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]
    pod["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    # The launcher's and the script's: then epochs enough for a replacement to start cold and join before the end
    # (about a minute on a quiet machine), saved on the claim.
    args = pod["containers"][0]["args"][:2]
    pod["containers"][0]["args"] = [*args, "--epochs=30", "--checkpoint-every=20", "--checkpoint-dir=/data/checkpoints"]
    # A Worker a node, where they fit (preferred: the replacement must still find a place on two nodes).
    mine = {"matchLabels": {"training.kubeflow.org/job-name": "mnist-elastic"}}
    apart = [{"weight": 100, "podAffinityTerm": {"labelSelector": mine, "topologyKey": "kubernetes.io/hostname"}}]
    pod["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": apart}}
    cluster.apply(job, namespace)
    workers = [f"mnist-elastic-worker-{i}" for i in range(3)]
    wait_for_a_checkpoint(data, timeout=300)
    pods = {p["metadata"]["name"]: p for p in cluster.kubectl_json("get", "pods", "-n", namespace)["items"]}
    where = {name: p["spec"]["nodeName"] for name, p in pods.items()}
    # A Worker alone on its node, away from the etcd (losing the rendezvous server is another story).
    alone = [w for w in workers if list(where.values()).count(where[w]) == 1 and where[w] != where["etcd"]]
    lost = alone[-1] if alone else workers[-1]
    node = cluster.node(where[lost])
    assert isinstance(node, kubelet.KubeletNode)
    operator_pods.move_operator_off(cluster, node.name)
    kubelet.stop(cluster.state, node)
    stopped = time.monotonic()
    try:
        finished = support.succeeded(cluster, namespace, "mnist-elastic", timeout=600)
        print(f"node of {lost} lost; the ElasticJob succeeded {time.monotonic() - stopped:.1f}s later")
        status = finished["status"]
        events = event_messages(cluster, namespace)
        if (status["attempt"], status.get("restartCount", 0)) != (0, 0):
            said = {w: cluster.kubectl("logs", "-n", namespace, w, check=False).stdout[-1500:] for w in workers}
            pytest.fail(f"the group restarted: {status.get('attempts')}\n{events[-3000:]}\n{said}")
        assert status["membershipChanges"] >= 2, status  # lost, then replaced: the group grew back
        assert f"{lost.removeprefix('mnist-elastic-')} joins the running group" in events, events[-3000:]
        # No reset crossed the dead link: the survivors left the broken group because they were told to.
        assert "its peers are told to leave the group it took with it" in events, events[-3000:]
        # An order reaches each process with its next report (within a second). The first survivor told leaves, its
        # launcher meets the others at the rendezvous again, and torchrun's agents restart a group whose rendezvous
        # has a node waiting within 0.1 s (--monitor-interval): the other survivor is often restarted by its own
        # agent before its report brings the order. So one survivor at least says it was told.
        logs = {w: cluster.kubectl("logs", "-n", namespace, w, "-c", "pytorch").stdout for w in workers if w != lost}
        told = [w for w, log in logs.items() if "was lost with its node, and no reset reaches this group's" in log]
        assert told, {w: log[-3000:] for w, log in logs.items()}
        elastic = cluster.kubectl_json("get", "elasticjob", "mnist-elastic", "-n", namespace)
        assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in elastic["status"]["conditions"])
        after = {p["metadata"]["name"]: p for p in cluster.kubectl_json("get", "pods", "-n", namespace)["items"]}
        assert after[lost]["spec"]["nodeName"] != node.name  # its replacement ran on a node that stayed
    finally:
        kubelet.start(cluster.state, node)
        cluster.kubectl("delete", "elasticjob", "mnist-elastic", "-n", namespace, "--wait=false", check=False)
