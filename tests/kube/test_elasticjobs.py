"""TorchElastic's ElasticJobs served by the torchjob operator on the real control plane: the CRD from deploy/, the
job applied with kubectl as TorchElastic's users apply theirs. It runs as a PyTorchJob the ElasticJob owns, its
launchers told the etcd rendezvous TorchElastic's controller prepended, `kubectl get elasticjobs` shows the columns
TorchElastic printed, `kubectl scale` grows and shrinks it within min and max, its status is Kubeflow's common
JobStatus, and one that cannot run says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kuberig import Cluster
from tests.support.cli import run_cli_on_cluster
from tests.support.cluster_jobs import get_job, running_pods
from tests.support.operator import OperatorProcess
from tests.support.paths import MNIST
from tests.support.waits import wait_until


def example(name: str) -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load((MNIST / "elasticjob.yaml").read_text())
    job["metadata"]["name"] = name
    return job


def get_elasticjob(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", "-n", namespace, "elasticjob", name))


def elastic_condition(cluster: Cluster, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    conditions = get_elasticjob(cluster, namespace, name).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


def test_an_elasticjob_runs_as_a_pytorchjob_it_owns_meeting_at_its_etcd(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    cluster.apply(example("ej"), namespace)
    wait_until(lambda: len(running_pods(cluster, namespace, "ej")) == 3, what="the ElasticJob's three Worker Pods")
    child = get_job(cluster, namespace, "ej")
    owner = child["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "ElasticJob",
        "ej",
        get_elasticjob(cluster, namespace, "ej")["metadata"]["uid"],
    )
    running = running_pods(cluster, namespace, "ej")
    container = running["ej-worker-0"]["spec"]["containers"][0]
    # TorchElastic's controller prepended --rdzv_backend=etcd --rdzv_endpoint --rdzv_id --nnodes: the same values,
    # as the variables the launcher reads for those flags; the image's entrypoint runs, the args as written.
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["PET_RDZV_BACKEND"], env["PET_RDZV_ENDPOINT"], env["PET_NNODES"]) == (
        "etcd",
        "etcd-service:2379",
        "2:3",
    )
    assert env["PET_RDZV_ID"] == "ej-0"
    assert "command" not in container and container["args"][:2] == ["--nproc_per_node=1", "train.py"]
    assert container["image"] == "ghcr.io/torchjob/examples-mnist-elastic:0.1"
    wait_until(
        lambda: elastic_condition(cluster, namespace, "ej", "Running") is not None, what="Running on the ElasticJob"
    )
    status = get_elasticjob(cluster, namespace, "ej")["status"]
    assert status["replicaStatuses"]["Worker"]["active"] == 3 and "startTime" in status
    columns = cluster.kubectl("get", "-n", namespace, "elasticjobs").stdout.splitlines()
    assert columns[0].split() == ["NAME", "MIN", "MAX", "DESIRED", "RDZVENDPOINT", "STATE", "AGE"]
    assert columns[1].split()[:6] == ["ej", "2", "3", "3", "etcd-service:2379", "Running"]

    # Scaled as TorchElastic's users scale it: the group shrinks without a restart, and grows back.
    cluster.kubectl("scale", "-n", namespace, "elasticjob", "ej", "--replicas=2")
    wait_until(lambda: len(running_pods(cluster, namespace, "ej")) == 2, what="the group shrunk to 2")
    assert get_job(cluster, namespace, "ej")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert run_cli_on_cluster(cluster, "scale", "--cluster", "-n", namespace, "ej", "--workers", "3").returncode == 0
    wait_until(lambda: len(running_pods(cluster, namespace, "ej")) == 3, what="the group grown back to 3")
    assert get_elasticjob(cluster, namespace, "ej")["spec"]["replicaSpecs"]["Worker"]["replicas"] == 3
    status = get_job(cluster, namespace, "ej")["status"]
    assert (status["attempt"], status["restartCount"]) == (0, 0) and status["membershipChanges"] >= 2

    for pod in running_pods(cluster, namespace, "ej"):
        cluster.end_pod(namespace, pod, 0)
    wait_until(lambda: elastic_condition(cluster, namespace, "ej", "Succeeded") is not None, what="Succeeded")
    cluster.kubectl("delete", "-n", namespace, "elasticjob", "ej", "--wait=true")
    wait_until(
        lambda: not cluster.kubectl_json("get", "-n", namespace, "pytorchjobs")["items"],
        what="the owned PyTorchJob to go",
    )


def test_an_elasticjob_refused_at_admission_or_failed_says_why(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    bad = example("bad")
    bad["spec"].update(minReplicas=3, maxReplicas=2)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    refused = cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    assert refused.returncode != 0 and "minReplicas: must be at most maxReplicas" in refused.stderr
    unreachable = example("no-port")
    unreachable["spec"]["rdzvEndpoint"] = "etcd-service"
    cluster.apply(unreachable, namespace)
    wait_until(lambda: elastic_condition(cluster, namespace, "no-port", "Failed") is not None, what="Failed")
    failed = elastic_condition(cluster, namespace, "no-port", "Failed")
    assert failed is not None and "spec.rdzvEndpoint: must be host:port" in failed["message"]
    assert not cluster.kubectl_json("get", "-n", namespace, "pytorchjobs")["items"]


def test_torchjob_submit_creates_the_elasticjob_as_written(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(example("submitted")))
    submitted = run_cli_on_cluster(cluster, "submit", str(path), "-n", namespace)
    assert submitted.returncode == 0, submitted.stderr
    assert f"elasticjob.elastic.pytorch.org/submitted created in namespace {namespace}" in submitted.stderr
    written = get_elasticjob(cluster, namespace, "submitted")
    assert written["spec"]["rdzvEndpoint"] == "etcd-service:2379"
    wait_until(lambda: len(running_pods(cluster, namespace, "submitted")) == 3, what="its three Worker Pods")
