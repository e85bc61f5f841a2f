"""PyTorchJobs on a test cluster: a manifest to apply, and the job and its Pods read back as kubectl reads them."""

from __future__ import annotations

from typing import Any

from kuberig import Cluster
from torchjob.testing import make_job


def job_manifest(
    name: str,
    workers: int = 2,
    master: bool = True,
    restart_policy: str = "ExitCode",
    run_policy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A PyTorchJob to apply (``torchjob.testing``'s builder): a Master unless not ``master``, ``workers`` Workers."""
    builder = make_job(name)
    if master:
        builder.master()
    builder.workers(workers).restart_policy(restart_policy)
    if run_policy:
        builder.run_policy(**run_policy)
    return builder.wire()


def get_job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The PyTorchJob as the API server has it, status included."""
    return dict(cluster.kubectl_json("get", "-n", namespace, "pytorchjob", name))


def pods(cluster: Cluster, namespace: str, job: str, label: str = "training.kubeflow.org/job-name") -> dict[str, Any]:
    """The job's replica Pods, as Kubeflow's label selects them (``label``: torchjob's, for its helpers too)."""
    items = cluster.kubectl_json("get", "-n", namespace, "pods", "-l", f"{label}={job}")["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def all_pods(cluster: Cluster, namespace: str, job: str) -> dict[str, Any]:
    """Every Pod torchjob made for the job: replicas, the rendezvous store, warm spares."""
    return pods(cluster, namespace, job, label="torchjob.io/job-name")


def running_pods(cluster: Cluster, namespace: str, job: str, attempt: int = 0) -> dict[str, dict[str, Any]]:
    """The job's replica Pods of ``attempt`` that are Running."""
    return {
        name: p
        for name, p in pods(cluster, namespace, job).items()
        if p.get("status", {}).get("phase") == "Running"
        and p["metadata"]["labels"].get("torchjob.io/attempt") == str(attempt)
    }
