"""Kubeflow's defaulting of a PyTorchJob (what its webhook does before the controller sees the job).

Defaults are applied to a copy; the result is what ``torchjob render --to pytorchjob`` prints and what both
backends plan from.
"""

from __future__ import annotations

import copy
from typing import Any

from torchjob.api.types import (
    DEFAULT_CONTAINER_NAME,
    DEFAULT_PORT,
    DEFAULT_PORT_NAME,
    CleanPodPolicy,
    PyTorchJob,
    ReplicaType,
    RestartPolicy,
)

DEFAULT_NAMESPACE = "default"
DEFAULT_NPROC_PER_NODE = "auto"
DEFAULT_ELASTIC_MAX_RESTARTS = 100


def with_defaults(job: PyTorchJob) -> PyTorchJob:
    """Return a copy of ``job`` with Kubeflow's defaults applied; ``job`` itself is not changed."""
    job = job.model_copy(deep=True)
    if not job.metadata.namespace:
        job.metadata.namespace = DEFAULT_NAMESPACE
    spec = job.spec
    for replica in spec.pytorch_replica_specs.values():
        if replica.replicas is None:
            replica.replicas = 1
        if replica.restart_policy is None:
            replica.restart_policy = RestartPolicy.ON_FAILURE
        replica.template = _with_default_port(replica.template)
    if spec.run_policy.clean_pod_policy is None:
        spec.run_policy.clean_pod_policy = CleanPodPolicy.NONE
    if spec.run_policy.suspend is None:
        spec.run_policy.suspend = False
    if spec.nproc_per_node is None and (spec.elastic_policy is None or spec.elastic_policy.n_proc_per_node is None):
        spec.nproc_per_node = DEFAULT_NPROC_PER_NODE
    elastic = spec.elastic_policy
    if elastic is not None:
        # One bound set → the other copies it; none → both are the Worker replica count.
        if elastic.min_replicas is None and elastic.max_replicas is not None:
            elastic.min_replicas = elastic.max_replicas
        elif elastic.max_replicas is None and elastic.min_replicas is not None:
            elastic.max_replicas = elastic.min_replicas
        elif elastic.min_replicas is None and elastic.max_replicas is None:
            worker = spec.pytorch_replica_specs.get(ReplicaType.WORKER)
            count = worker.replicas if worker is not None and worker.replicas is not None else 1
            elastic.min_replicas = elastic.max_replicas = count
        if elastic.rdzv_backend is None:
            elastic.rdzv_backend = "c10d"
        if elastic.max_restarts is None:
            # torchrun's own default is 0, with which the first member lost ends the whole group: the
            # survivors' agents give up instead of re-forming it. Membership changes are what elastic is for.
            elastic.max_restarts = DEFAULT_ELASTIC_MAX_RESTARTS
    return job


def _with_default_port(template: dict[str, Any]) -> dict[str, Any]:
    """Add the ``pytorchjob-port`` (23456) to the ``pytorch`` container when it does not declare it."""
    template = copy.deepcopy(template)
    # Validation reports a template of the wrong shape; defaulting leaves such a template alone.
    spec = template.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    for container in containers if isinstance(containers, list) else []:
        if not isinstance(container, dict) or container.get("name") != DEFAULT_CONTAINER_NAME:
            continue
        ports = container.setdefault("ports", [])
        if not isinstance(ports, list):
            continue
        if not any(isinstance(p, dict) and p.get("name") == DEFAULT_PORT_NAME for p in ports):
            ports.append({"name": DEFAULT_PORT_NAME, "containerPort": DEFAULT_PORT, "protocol": "TCP"})
    return template
