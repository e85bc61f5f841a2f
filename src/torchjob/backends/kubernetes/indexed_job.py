"""The operator-less path: a PyTorchJob rendered as a ``batch/v1`` Indexed Job plus a headless Service.

Every pod runs torchrun with its node rank taken from ``JOB_COMPLETION_INDEX`` (Kubernetes expands
``$(JOB_COMPLETION_INDEX)`` in args), and meets the others at index 0's stable DNS name
``<job>-0.<job>`` (the Job's pods get ``subdomain: <job>``, served by the headless Service). Pure: the same
job gives the same manifests.

What an Indexed Job cannot express is reported, not dropped silently: every replica runs the same pod
template (the Master's, or the Worker's without one), and group restarts are the Job's own pod retries.
"""

from __future__ import annotations

import copy
from typing import Any

from torchjob.api.types import DEFAULT_CONTAINER_NAME, DEFAULT_PORT, PyTorchJob, ReplicaType
from torchjob.core.replicas import total_replicas

_PYTHON = ("python", "python3")


def render(job: PyTorchJob) -> tuple[list[dict[str, Any]], list[str]]:
    """The Service and the Job, and notes on what did not carry over."""
    notes: list[str] = []
    specs = job.spec.pytorch_replica_specs
    source = specs.get(ReplicaType.MASTER) or specs[ReplicaType.WORKER]
    if ReplicaType.MASTER in specs and ReplicaType.WORKER in specs:
        master, worker = specs[ReplicaType.MASTER].template, specs[ReplicaType.WORKER].template
        if master != worker:
            notes.append("Master and Worker pod templates differ; every pod uses the Master's")
    nodes = total_replicas(job)
    name = job.name
    labels = {"training.kubeflow.org/job-name": name}
    template = copy.deepcopy(source.template)
    template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    pod = template.setdefault("spec", {})
    pod["subdomain"] = name
    pod["restartPolicy"] = "Never"
    container = next(c for c in pod["containers"] if c.get("name") == DEFAULT_CONTAINER_NAME)
    container["command"], container["args"] = _torchrun(job, container, nodes, f"{name}-0.{name}")
    run = job.spec.run_policy
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": nodes,
        "parallelism": nodes,
        "backoffLimit": run.backoff_limit if run.backoff_limit is not None else 0,
        "template": template,
    }
    if run.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = run.active_deadline_seconds
    if run.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = run.ttl_seconds_after_finished
    if run.suspend:
        job_spec["suspend"] = True
    if job.spec.elastic_policy is not None:
        notes.append("elasticPolicy is not carried over: an Indexed Job has a fixed number of pods")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": job.namespace, "labels": dict(labels)},
        "spec": {
            "clusterIP": "None",
            "selector": dict(labels),
            "ports": [{"name": "pytorchjob-port", "port": DEFAULT_PORT}],
        },
    }
    batch_job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": job.namespace, "labels": dict(labels)},
        "spec": job_spec,
    }
    return [service, batch_job], notes


def _torchrun(job: PyTorchJob, container: dict[str, Any], nodes: int, master: str) -> tuple[list[str], list[str]]:
    """The container's program, launched through torchrun with this pod's node rank."""
    program = [*container.get("command", []), *container.get("args", [])]
    if program[:1] and program[0].rsplit("/", 1)[-1] in _PYTHON:
        program = program[1:]  # torchrun runs the script (or `-m module`) itself
    nproc = job.spec.nproc_per_node or "1"
    options = [
        f"--nnodes={nodes}",
        f"--nproc-per-node={1 if nproc == 'auto' else nproc}",
        "--node-rank=$(JOB_COMPLETION_INDEX)",
        f"--master-addr={master}",
        f"--master-port={DEFAULT_PORT}",
    ]
    return ["torchrun"], [*options, *program]
