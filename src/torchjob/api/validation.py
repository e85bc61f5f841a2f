"""Kubeflow's validation rules for a PyTorchJob, plus torchjob's own annotations.

Each rule adds one ``field.path: what is expected, got what`` line; all problems are reported at once so a
user fixes the file in one go.
"""

from __future__ import annotations

import re
from typing import Any

from torchjob.api.errors import ValidationError
from torchjob.api.extensions import ANNOTATION_RULES
from torchjob.api.types import DEFAULT_CONTAINER_NAME, PyTorchJob, ReplicaType

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_NPROC_WORDS = {"auto", "cpu", "gpu"}


def validate(job: PyTorchJob) -> None:
    """Raise :class:`ValidationError` listing every problem of ``job``; return quietly when it is valid."""
    problems: list[str] = []
    problems += _check_name(job)
    problems += _check_replica_specs(job)
    problems += _check_nproc(job)
    problems += _check_elastic(job)
    problems += _check_annotations(job)
    if problems:
        raise ValidationError(problems)


def _check_name(job: PyTorchJob) -> list[str]:
    name = job.metadata.name
    if not name:
        return ["metadata.name: required"]
    if len(name) > 63 or not _DNS1035.match(name):
        return [
            f"metadata.name: must be a DNS-1035 label (lowercase letters, digits and '-', starting with a "
            f"letter, at most 63 characters), got {name!r}"
        ]
    return []


def _check_replica_specs(job: PyTorchJob) -> list[str]:
    specs = job.spec.pytorch_replica_specs
    if not specs:
        return ["spec.pytorchReplicaSpecs: must have a Master or a Worker"]
    problems: list[str] = []
    for rtype, replica in specs.items():
        path = f"spec.pytorchReplicaSpecs.{rtype.value}"
        if replica.replicas is not None:
            if rtype is ReplicaType.MASTER and replica.replicas != 1:
                problems.append(f"{path}.replicas: must be 1, got {replica.replicas}")
            elif rtype is ReplicaType.WORKER and replica.replicas < 1:
                problems.append(f"{path}.replicas: must be at least 1, got {replica.replicas}")
        problems += _check_template(path + ".template", replica.template)
    return problems


def _check_template(path: str, template: dict[str, Any]) -> list[str]:
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return [f"{path}.spec: required (a pod spec with a container named {DEFAULT_CONTAINER_NAME!r})"]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [f"{path}.spec.containers: must list at least the container {DEFAULT_CONTAINER_NAME!r}"]
    problems: list[str] = []
    names = []
    for i, container in enumerate(containers):
        if not isinstance(container, dict):
            problems.append(f"{path}.spec.containers[{i}]: must be a mapping, got {type(container).__name__}")
            continue
        names.append(container.get("name"))
        label = container.get("name") or str(i)
        if not container.get("image"):
            problems.append(f"{path}.spec.containers[{label}].image: required")
        for field in ("command", "args"):
            value = container.get(field)
            if value is not None and (not isinstance(value, list) or not all(isinstance(a, str) for a in value)):
                problems.append(f"{path}.spec.containers[{label}].{field}: must be a list of strings")
        env = container.get("env")
        if env is not None and (
            not isinstance(env, list) or not all(isinstance(e, dict) and e.get("name") for e in env)
        ):
            problems.append(f"{path}.spec.containers[{label}].env: must be a list of {{name, value}} entries")
    if DEFAULT_CONTAINER_NAME not in names:
        problems.append(
            f"{path}.spec.containers: must have a container named {DEFAULT_CONTAINER_NAME!r}, "
            f"got {', '.join(repr(n) for n in names) or 'none'}"
        )
    return problems


def _check_nproc(job: PyTorchJob) -> list[str]:
    problems = []
    value = job.spec.nproc_per_node
    if value is not None and value not in _NPROC_WORDS and not (value.isdigit() and int(value) > 0):
        problems.append(f"spec.nprocPerNode: must be auto, cpu, gpu or a positive integer, got {value!r}")
    elastic = job.spec.elastic_policy
    if value is not None and elastic is not None and elastic.n_proc_per_node is not None:
        problems.append(
            "spec.nprocPerNode: cannot be set together with spec.elasticPolicy.nProcPerNode (deprecated); "
            "keep only spec.nprocPerNode"
        )
    return problems


def _check_elastic(job: PyTorchJob) -> list[str]:
    elastic = job.spec.elastic_policy
    if elastic is None:
        return []
    problems = []
    if ReplicaType.WORKER not in job.spec.pytorch_replica_specs:
        problems.append("spec.elasticPolicy: requires a Worker replica spec")
    lo, hi = elastic.min_replicas, elastic.max_replicas
    if lo is not None and hi is not None and lo > hi:
        problems.append(f"spec.elasticPolicy.minReplicas: must not exceed maxReplicas ({hi}), got {lo}")
    return problems


def _check_annotations(job: PyTorchJob) -> list[str]:
    problems = []
    for key, value in (job.metadata.annotations or {}).items():
        rule = ANNOTATION_RULES.get(key)
        if rule is not None:
            problem = rule(value)
            if problem:
                problems.append(f"metadata.annotations[{key}]: {problem}")
    return problems
