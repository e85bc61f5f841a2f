"""Kubeflow's validation rules for a PyTorchJob, plus torchjob's own annotations.

Each rule adds one ``field.path: what is expected, got what`` line; all problems are reported at once so a
user fixes the file in one go.
"""

from __future__ import annotations

import re

from torchjob.api import extensions
from torchjob.api.errors import ValidationError
from torchjob.api.extensions import ANNOTATION_RULES, SPARES
from torchjob.api.names import DNS1035_LABEL, DNS1123_LABEL, DNS1123_SUBDOMAIN
from torchjob.api.pod_templates import template_problems
from torchjob.api.types import INT32_MAX, PyTorchJob, ReplicaType

_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_NPROC_WORDS = {"auto", "cpu", "gpu"}
_MAX_ANNOTATIONS_BYTES = 256 * 1024


def validate(job: PyTorchJob) -> None:
    """Raise ``ValidationError`` listing every problem of ``job``; return quietly when it is valid."""
    problems: list[str] = []
    problems += _check_name(job)
    problems += _check_metadata(job)
    problems += _check_replica_specs(job)
    problems += _check_nproc(job)
    problems += _check_elastic(job)
    problems += _check_annotations(job)
    managed_by = extensions.managed_by_problem(job.spec.run_policy.managed_by)
    if managed_by:
        problems.append(f"spec.runPolicy.managedBy: {managed_by}")
    if problems:
        raise ValidationError(problems)


def _check_name(job: PyTorchJob) -> list[str]:
    name = job.metadata.name
    if not name:
        return ["metadata.name: required"]
    if len(name) > 63 or not DNS1035_LABEL.match(name):
        return [
            f"metadata.name: must be a DNS-1035 label (lowercase letters, digits and '-', starting with a "
            f"letter, at most 63 characters), got {name!r}"
        ]
    return []


def _check_metadata(job: PyTorchJob) -> list[str]:
    problems = []
    namespace = job.metadata.namespace
    if namespace is not None and (len(namespace) > 63 or not DNS1123_LABEL.match(namespace)):
        problems.append(
            f"metadata.namespace: must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 "
            f"characters), got {namespace!r}"
        )
    for key, value in (job.metadata.labels or {}).items():
        problem = _qualified_name_problem(key)
        if problem:
            problems.append(f"metadata.labels: key {key!r} {problem}")
        elif value and (len(value) > 63 or not _LABEL_NAME.match(value)):
            problems.append(
                f"metadata.labels[{key}]: must be at most 63 letters, digits, '-', '_' or '.', starting and ending "
                f"with a letter or digit, got {value!r}"
            )
    annotations = job.metadata.annotations or {}
    for key in annotations:
        problem = _qualified_name_problem(key)
        if problem:
            problems.append(f"metadata.annotations: key {key!r} {problem}")
    if sum(len(k) + len(v) for k, v in annotations.items()) > _MAX_ANNOTATIONS_BYTES:
        problems.append("metadata.annotations: must hold at most 256 KiB in all")
    return problems


def _qualified_name_problem(key: str) -> str | None:
    """Kubernetes' rule for label and annotation keys: an optional DNS prefix, '/', and a name."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return "must have a DNS-1123 subdomain before its '/'"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return "must be a name of at most 63 letters, digits, '-', '_' or '.' (with an optional 'prefix/')"
    return None


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
        problems += template_problems(path + ".template", replica.template)
    return problems


def _check_nproc(job: PyTorchJob) -> list[str]:
    problems = []
    value = job.spec.nproc_per_node
    if (
        value is not None
        and value not in _NPROC_WORDS
        and not (value.isascii() and value.isdigit() and 0 < int(value) <= INT32_MAX)
    ):
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
    spares = (job.metadata.annotations or {}).get(SPARES)
    nproc = job.spec.nproc_per_node or "1"
    several = nproc not in ("1", "auto", "cpu", "gpu")  # auto, cpu and gpu count as one process (core/envs.py)
    if spares not in (None, "", "0") or (spares == "0" and job.spec.elastic_policy is not None):
        if not nproc.isdigit() and nproc not in ("auto", "cpu", "gpu"):
            problems.append(
                f"metadata.annotations[{SPARES}]: in-place repair needs a count of processes per replica "
                f"(nprocPerNode, e.g. 4), got nprocPerNode {nproc!r}"
            )
        elif (job.spec.elastic_policy is not None or several) and _starts_torchrun(job):
            problems.append(
                f"metadata.annotations[{SPARES}]: under in-place repair the script runs directly "
                "(torchjob.train forms and re-forms the group, and starts a replica's nprocPerNode processes), "
                "but its command starts torchrun; use e.g. command: [python, train.py], or drop the annotation "
                "to keep torchrun"
            )
    return problems


def _starts_torchrun(job: PyTorchJob) -> bool:
    for replica in job.spec.pytorch_replica_specs.values():
        for container in replica.template.get("spec", {}).get("containers") or []:
            if isinstance(container, dict):
                argv = " ".join(str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])])
                if "torchrun" in argv or "torch.distributed.run" in argv:
                    return True
    return False
