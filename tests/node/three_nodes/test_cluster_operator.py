"""The operator in the cluster: a job spread over the three nodes trains with its ranks on different nodes, its Pods'
progress reports reach the operator's leader through its Service, and the operator reaches the API server through
``kubernetes.default``. When the node that runs the leader vanishes, the standby takes over and, once Kubernetes
has marked that node unreachable, the next job runs on the remaining nodes.
"""

from __future__ import annotations

import time

from kuberig import Cluster
from kuberig.node import kubelet
from tests.node.three_nodes import support
from tests.support import operator_pods


def test_a_job_spread_over_three_nodes_trains_and_reports_to_the_operator_in_the_cluster(three_nodes: Cluster) -> None:
    cluster = three_nodes
    namespace = cluster.namespace("spread")
    cluster.apply(support.spread_job("spread", namespace, steps=30))
    job = support.succeeded(cluster, namespace, "spread", timeout=300)
    pods = cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
    assert len({p["spec"]["nodeName"] for p in pods}) == 3  # one rank per node: the group crossed nodes
    # The Pods' reports reached the operator through its Service (ClusterIP, kube-proxy): progress is known.
    assert job["status"]["trainerStatus"]["progressPercentage"] == 100
    assert len(operator_pods.operator_pods(cluster)) == 2 and operator_pods.leader(
        cluster
    ) in operator_pods.operator_pods(cluster)
    assert operator_pods.report_endpoints(cluster) == [
        operator_pods.leader(cluster)
    ]  # reports reach the leader, never a standby


def test_when_the_leaders_node_vanishes_the_standby_takes_over(three_nodes: Cluster) -> None:
    cluster = three_nodes
    leader = operator_pods.leader(cluster)
    node = cluster.node(operator_pods.operator_pods(cluster)[leader])
    assert isinstance(node, kubelet.KubeletNode)
    kubelet.stop(cluster.state, node)  # the link goes first: nothing of the old leader gets out
    try:
        deadline = time.monotonic() + 120
        while operator_pods.leader(cluster) == leader:  # the lease runs out (15 s), the standby takes it
            assert time.monotonic() < deadline, "the standby never took the lease"
            time.sleep(1)
        # The report Service follows: it routes to the new leader alone (leader_label.py).
        while operator_pods.report_endpoints(cluster) != [operator_pods.leader(cluster)]:
            assert time.monotonic() < deadline, (
                f"the report Service routes to {operator_pods.report_endpoints(cluster)}"
            )
            time.sleep(1)
        # The scheduler keeps placing Pods on the lost node until Kubernetes marks it unreachable (the fast
        # profile's 16 s grace): a Pod placed there before would wait for an eviction that never completes.
        while not support.tainted_unreachable(cluster, node.name):
            assert time.monotonic() < deadline, f"{node.name} was never marked unreachable"
            time.sleep(1)
        namespace = cluster.namespace("after")
        job = support.spread_job("after", namespace, steps=10)
        for spec in job["spec"]["pytorchReplicaSpecs"].values():  # two nodes left: no anti-affinity
            spec["template"]["spec"].pop("affinity", None)  # one template, shared
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1
        cluster.apply(job)
        support.succeeded(cluster, namespace, "after", timeout=300)
        pods = cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
        assert node.name not in {p["spec"]["nodeName"] for p in pods}
    finally:
        kubelet.start(cluster.state, node)
