"""Kubeflow's own Python SDK (``kubeflow-training``'s TrainingClient) against the torchjob operator."""

from __future__ import annotations

from pathlib import Path

from kubeflow.training import TrainingClient

from kuberig import Cluster
from tests.support.cluster_jobs import pods
from tests.support.operator import OperatorProcess
from tests.support.waits import wait_until


def test_training_client_creates_waits_for_and_reads_logs_of_a_job(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    sdk = TrainingClient(config_file=str(cluster.kubeconfig), namespace=namespace)
    sdk.create_job(name="sdk-job", base_image="example/train:1", num_workers=3)

    sdk.wait_for_job_conditions("sdk-job", expected_conditions={"Running"}, timeout=60, polling_interval=1)
    assert sdk.is_job_running("sdk-job")
    names = sorted(sdk.get_job_pod_names("sdk-job"))
    assert names == ["sdk-job-master-0", "sdk-job-worker-0", "sdk-job-worker-1"]
    wait_until(lambda: len(pods(cluster, namespace, "sdk-job")) == 3, what="three pods")

    cluster.serve_logs(
        namespace, "sdk-job-master-0", "pytorch", ["epoch 1 loss 0.9", "epoch 2 loss 0.4"], tmp_path / "m"
    )
    logs, _ = sdk.get_job_logs("sdk-job")
    assert logs == {"sdk-job-master-0": "epoch 1 loss 0.9\nepoch 2 loss 0.4\n"}

    cluster.end_pod(namespace, "sdk-job-master-0", 0)
    job = sdk.wait_for_job_conditions("sdk-job", timeout=60, polling_interval=1)
    assert sdk.is_job_succeeded("sdk-job")
    assert job.status.replica_statuses["Master"].succeeded == 1
    sdk.delete_job("sdk-job")
    wait_until(lambda: not sdk.list_jobs(), what="the job to be deleted")
