"""The operator reads a job's Pods from a real API server a page at a time, and keeps them without what it never
reads (the API server's record of who set which field, managedFields, and the spec but for the node): what a job of
a thousand replicas costs it in memory."""

from __future__ import annotations

import pytest
from lightkube import Client, KubeConfig

from kuberig import Cluster
from tests.support.operator import OperatorProcess
from torchjob.api.loading import job_from_mapping
from torchjob.api.types import ReplicaType
from torchjob.backends.kubernetes import backend as kube_backend
from torchjob.backends.kubernetes import mapping
from torchjob.core.replicas import ReplicaId
from torchjob.testing import make_job


def test_a_jobs_pods_are_read_a_page_at_a_time_without_their_managed_fields(
    cluster: Cluster, namespace: str, operator: OperatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Queued elsewhere (MultiKueue's): the running operator leaves the job alone, its Pods are the ones made here.
    wire = make_job("paged").master().workers(4).run_policy(managedBy="kueue.x-k8s.io/multikueue").wire()
    cluster.apply(wire, namespace)
    wire = cluster.kubectl_json("get", "-n", namespace, "pytorchjob", "paged")
    job = job_from_mapping(wire)
    replicas = [ReplicaId(ReplicaType.MASTER, 0), *(ReplicaId(ReplicaType.WORKER, i) for i in range(4))]
    for replica in replicas:
        cluster.apply(mapping.pod_manifest(job, replica, 0), namespace)
    monkeypatch.setattr(kube_backend, "PODS_PER_PAGE", 2)
    backend = kube_backend.KubernetesBackend(Client(KubeConfig.from_file(str(cluster.kubeconfig))))
    seen = backend.observe(job)
    assert sorted(str(o.replica) for o in seen.replicas) == sorted(str(r) for r in replicas)
    assert backend.counter.by_verb["list"] == 3  # 5 Pods, 2 a page: a request counted per page
    kept = list(backend._pods.values())
    assert len(kept) == 5 and not any("managedFields" in p["metadata"] for p in kept)
    assert all(set(p["spec"]) <= {"nodeName"} for p in kept)
    assert all(p["metadata"]["labels"] and p["status"]["phase"] for p in kept)  # the rest is whole
    backend.end_pass()
    assert backend._pods == {}
