"""TrainJobs (Kubeflow Trainer v2) served by the torchjob operator on the real control plane: Trainer's CRDs from
deploy/, Kubeflow's own torch-distributed runtime applied unchanged, the TrainJob applied with kubectl. It runs as
a PyTorchJob the TrainJob owns, its status is Trainer's shape, suspend is passed on, and a TrainJob that cannot
run says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from kuberig import Cluster
from tests.support.cli import run_cli_on_cluster
from tests.support.cluster_jobs import get_job, pods, running_pods
from tests.support.operator import OperatorProcess
from tests.support.trainer import TORCH_DISTRIBUTED
from tests.support.waits import wait_until

TOLERATION = {"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}


def trainjob(name: str, nodes: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": nodes, "command": ["torchrun", "train.py"]},
            **spec,
        },
    }


def get_trainjob(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", "-n", namespace, "trainjob", name))


def trainjob_condition(cluster: Cluster, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    conditions = get_trainjob(cluster, namespace, name).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def running(cluster: Cluster, namespace: str, name: str) -> list[str]:
    return [p for p, pod in pods(cluster, namespace, name).items() if pod.get("status", {}).get("phase") == "Running"]


def test_a_trainjob_runs_as_a_pytorchjob_it_owns_and_completes_in_trainers_shape(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    cluster.apply(TORCH_DISTRIBUTED)
    cluster.apply(trainjob("tj"), namespace)
    wait_until(lambda: len(running_pods(cluster, namespace, "tj")) == 2, what="the TrainJob's two node Pods")
    child = get_job(cluster, namespace, "tj")
    owner = child["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "TrainJob",
        "tj",
        get_trainjob(cluster, namespace, "tj")["metadata"]["uid"],
    )
    running = running_pods(cluster, namespace, "tj")
    env = {p: {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]} for p, pod in running.items()}
    assert {p: (e["PET_NNODES"], e["PET_NODE_RANK"], e["PET_NPROC_PER_NODE"]) for p, e in env.items()} == {
        "tj-master-0": ("2", "0", "1"),
        "tj-worker-0": ("2", "1", "1"),
    }
    labels = {p: pod["metadata"]["labels"] for p, pod in running.items()}
    assert {
        p: (lb["jobset.sigs.k8s.io/jobset-name"], lb["batch.kubernetes.io/job-completion-index"])
        for p, lb in labels.items()
    } == {
        "tj-master-0": ("tj", "0"),
        "tj-worker-0": ("tj", "1"),
    }
    assert all(lb["trainer.kubeflow.org/trainjob-name"] == "tj" for lb in labels.values())
    assert {pod["spec"]["containers"][0]["name"] for pod in running.values()} == {"node"}  # Trainer's name for it
    assert all(pod["spec"]["containers"][0]["image"].startswith("pytorch/pytorch:") for pod in running.values())
    wait_until(
        lambda: (
            (get_trainjob(cluster, namespace, "tj").get("status") or {}).get("jobsStatus", [{}])[0].get("ready") == 1
        ),
        what="jobsStatus to show the node job ready",
    )
    cluster.end_pod(namespace, "tj-master-0", 0)
    wait_until(lambda: trainjob_condition(cluster, namespace, "tj", "Complete") is not None, what="Complete")
    status = get_trainjob(cluster, namespace, "tj")["status"]
    assert trainjob_condition(cluster, namespace, "tj", "Complete")["status"] == "True"  # type: ignore[index]
    assert status["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]
    printed = cluster.kubectl("get", "-n", namespace, "trainjob", "tj").stdout
    assert "Complete" in printed.splitlines()[1]
    cluster.kubectl("delete", "-n", namespace, "trainjob", "tj", "--wait=true")
    wait_until(
        lambda: not cluster.kubectl_json("get", "-n", namespace, "pytorchjobs")["items"],
        what="the owned PyTorchJob to go",
    )


def test_a_suspended_trainjob_starts_no_pod_until_it_is_resumed(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    cluster.apply(TORCH_DISTRIBUTED)
    cluster.apply(trainjob("queued", suspend=True), namespace)
    wait_until(lambda: trainjob_condition(cluster, namespace, "queued", "Suspended") is not None, what="Suspended")
    assert trainjob_condition(cluster, namespace, "queued", "Suspended")["status"] == "True"  # type: ignore[index]
    assert pods(cluster, namespace, "queued") == {}
    # Admission as Kueue writes it: its runtime patch on the suspended TrainJob first, then the resume.
    admitted = {"metadata": {"labels": {"kueue.x-k8s.io/podset": "node"}}, "spec": {"tolerations": [TOLERATION]}}
    patch = {"name": "node", "template": {"spec": {"template": admitted}}}
    runtime_patch = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}
    runtime_patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] = [patch]
    body = json.dumps({"spec": {"runtimePatches": [runtime_patch]}})
    cluster.kubectl("patch", "-n", namespace, "trainjob", "queued", "--type=merge", "-p", body)
    cluster.kubectl("patch", "-n", namespace, "trainjob", "queued", "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_until(lambda: len(running(cluster, namespace, "queued")) == 2, what="the admitted job's Pods")
    started = pods(cluster, namespace, "queued").values()
    assert all(pod["metadata"]["labels"].get("kueue.x-k8s.io/podset") == "node" for pod in started)
    assert all(TOLERATION in pod["spec"].get("tolerations", []) for pod in started)
    wait_until(
        lambda: (trainjob_condition(cluster, namespace, "queued", "Suspended") or {}).get("reason") == "Resumed",
        what="Suspended False, Resumed",
    )
    assert trainjob_condition(cluster, namespace, "queued", "Suspended")["status"] == "False"  # type: ignore[index]


def test_a_trainjob_that_cannot_run_says_why_and_one_of_multikueue_is_left_alone(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    cluster.apply({**trainjob("nowhere"), "spec": {"runtimeRef": {"name": "no-such-runtime"}}}, namespace)
    cluster.apply(trainjob("theirs", managedBy="kueue.x-k8s.io/multikueue"), namespace)
    wait_until(lambda: trainjob_condition(cluster, namespace, "nowhere", "Failed") is not None, what="Failed")
    failed = trainjob_condition(cluster, namespace, "nowhere", "Failed")
    assert failed is not None and "no ClusterTrainingRuntime named 'no-such-runtime'" in failed["message"]
    assert not cluster.kubectl_json("get", "-n", namespace, "pytorchjobs")["items"]
    assert not get_trainjob(cluster, namespace, "theirs").get("status")


def test_torchjob_submit_creates_the_trainjob_itself_where_the_cluster_serves_them(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    cluster.apply(TORCH_DISTRIBUTED)
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump(trainjob("sent", nodes=1)))
    submitted = run_cli_on_cluster(cluster, "submit", str(path), "-n", namespace)
    assert submitted.returncode == 0, submitted.stderr
    assert f"trainjob.trainer.kubeflow.org/sent created in namespace {namespace}" in submitted.stderr
    wait_until(lambda: len(running(cluster, namespace, "sent")) == 1, what="the submitted TrainJob's Pod")
    assert get_job(cluster, namespace, "sent")["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"


def test_kubeflows_trainer_sdk_creates_waits_for_and_reads_the_logs_of_a_trainjob(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    """Kubeflow's own SDK (``kubeflow`` 0.5, TrainerClient with its Kubernetes backend) sees the TrainJob as
    Trainer would show it: the node Pods as its steps (Trainer's JobSet labels and ``node`` container)."""
    from kubeflow.trainer import CustomTrainerContainer, KubernetesBackendConfig, TrainerClient

    cluster.apply(TORCH_DISTRIBUTED)
    config = KubernetesBackendConfig(namespace=namespace, config_file=str(cluster.kubeconfig))
    sdk = TrainerClient(backend_config=config)
    runtime = sdk.get_runtime("torch-distributed")
    name = sdk.train(runtime=runtime, trainer=CustomTrainerContainer(image="example/train:1", num_nodes=2))
    wait_until(lambda: len(running(cluster, namespace, name)) == 2, what="the SDK's TrainJob's two node Pods")
    job = sdk.wait_for_job_status(name, {"Running"}, timeout=60, polling_interval=1)
    assert sorted((step.name, step.pod_name) for step in job.steps) == [
        ("node-0", f"{name}-master-0"),
        ("node-1", f"{name}-worker-0"),
    ]
    cluster.serve_logs(namespace, f"{name}-master-0", "node", ["epoch 1 loss 0.9", "epoch 2 loss 0.4"], tmp_path / "m")
    assert [line.rstrip("\n") for line in sdk.get_job_logs(name)] == ["epoch 1 loss 0.9", "epoch 2 loss 0.4"]
    cluster.end_pod(namespace, f"{name}-master-0", 0)
    assert sdk.wait_for_job_status(name, timeout=60, polling_interval=1).status == "Complete"
    assert name in [listed.name for listed in sdk.list_jobs()]
    sdk.delete_job(name)
    wait_until(lambda: not sdk.list_jobs(), what="the TrainJob to be deleted")
