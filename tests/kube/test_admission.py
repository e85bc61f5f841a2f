"""Admission as Kubeflow's webhook does it, with no webhook: the CRD's CEL rules and structural defaults,
through a real API server, and Kubeflow's SDK reading jobs that `kubectl apply` created from Kubeflow's own
examples (which name no runPolicy: the defaults fill it in the stored object)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kubeflow.training import TrainingClient

from kuberig import Cluster
from tests.support.cluster_jobs import job_manifest
from tests.support.operator import OperatorProcess
from tests.support.paths import DATA

KUBEFLOW_EXAMPLES = sorted(DATA.glob("valid/kubeflow-*.yaml"))


def refused(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> str:
    result = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0, f"the API server accepted {manifest['metadata']['name']}"
    return result.stderr


def test_a_replica_type_named_twice_in_two_cases_is_refused(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    twice = job_manifest("twice", workers=1)
    specs = twice["spec"]["pytorchReplicaSpecs"]
    specs["worker"] = specs["Worker"]
    assert "a replica type is named twice (the case does not count)" in refused(cluster, namespace, twice)


@pytest.mark.parametrize("manager", ["example.com/my-operator", "torchjob.io/", "kubeflow.org/training-operator-v2"])
def test_managed_by_takes_kubeflows_values_or_a_torchjob_controller(
    cluster: Cluster, namespace: str, operator: OperatorProcess, manager: str
) -> None:
    job = job_manifest("managed", workers=1, run_policy={"managedBy": manager})
    assert "runPolicy.managedBy: must be kubeflow.org/training-operator or kueue.x-k8s.io/multikueue" in refused(
        cluster, namespace, job
    )


def test_managed_by_cannot_change(cluster: Cluster, namespace: str, operator: OperatorProcess) -> None:
    cluster.apply(job_manifest("queued", workers=1, run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}), namespace)
    patch = json.dumps({"spec": {"runPolicy": {"managedBy": "kubeflow.org/training-operator"}}})
    changed = cluster.kubectl(
        "patch", "pytorchjob", "queued", "-n", namespace, "--type=merge", "-p", patch, check=False
    )
    assert changed.returncode != 0 and "runPolicy.managedBy: is immutable" in changed.stderr
    dropped = json.dumps({"spec": {"runPolicy": {"managedBy": None}}})
    removed = cluster.kubectl(
        "patch", "pytorchjob", "queued", "-n", namespace, "--type=merge", "-p", dropped, check=False
    )
    assert removed.returncode != 0 and "runPolicy.managedBy: is immutable" in removed.stderr


@pytest.mark.parametrize("example", KUBEFLOW_EXAMPLES, ids=[p.stem for p in KUBEFLOW_EXAMPLES])
def test_kubeflows_sdk_reads_a_job_kubectl_applied_from_kubeflows_example(
    cluster: Cluster, namespace: str, operator: OperatorProcess, example: Any
) -> None:
    manifest = yaml.safe_load(example.read_text())
    manifest["metadata"].pop("namespace", None)
    assert "runPolicy" not in manifest["spec"]
    cluster.apply(manifest, namespace)
    stored = cluster.kubectl_json("get", "pytorchjob", manifest["metadata"]["name"], "-n", namespace)
    assert stored["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
    assert all(s["restartPolicy"] and s["replicas"] >= 1 for s in stored["spec"]["pytorchReplicaSpecs"].values())
    sdk = TrainingClient(config_file=str(cluster.kubeconfig), namespace=namespace)
    job = sdk.get_job(manifest["metadata"]["name"])  # raised "Invalid value for run_policy" before the defaults
    assert job.spec.run_policy.clean_pod_policy == "None"
    assert {j.metadata.name for j in sdk.list_jobs()} == {manifest["metadata"]["name"]}
