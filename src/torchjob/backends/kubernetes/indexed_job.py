"""The operator-less path: a PyTorchJob rendered as a ``batch/v1`` Indexed Job plus a headless Service.

Every pod runs torchrun with its node rank taken from ``JOB_COMPLETION_INDEX`` (Kubernetes expands
``$(JOB_COMPLETION_INDEX)`` in args), and meets the others at index 0's stable DNS name
``<job>-0.<job>`` (the Job's pods get ``subdomain: <job>``, served by the headless Service). Pure: the same
job gives the same manifests.

What an Indexed Job cannot express is reported, not dropped silently: every replica runs the same pod
template (the Master's, or the Worker's without one), and group restarts are the Job's own pod retries
(``backoffLimit``: the job's, or torchjob's default of 6 when unset).

How the container's program is launched:
- ``python script.py ...`` / ``python -m module ...`` → ``torchrun [options] script.py ...``;
- any other command (``python -c``, ``bash``, ``sleep``) → ``torchrun --no-python [options] COMMAND ...``;
- a command that already is torchrun is kept as written; its node count, rank and master come from the
  ``PET_*`` variables torchrun reads (as under Kubeflow);
- a container without a command is refused: only its image knows what it runs.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from torchjob.api.errors import ValidationError
from torchjob.api.extensions import DEFAULT_BACKOFF_LIMIT
from torchjob.api.types import DEFAULT_CONTAINER_NAME, DEFAULT_PORT, PyTorchJob, ReplicaType
from torchjob.core.replicas import LABEL_JOB_NAME, total_replicas

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# Kubernetes refuses an Indexed Job with more completions than this.
MAX_INDEXED_COMPLETIONS = 100_000
_COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


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
    if nodes > MAX_INDEXED_COMPLETIONS:
        raise ValidationError(
            [
                f"spec.pytorchReplicaSpecs: {nodes} replicas are too many for one Indexed Job "
                f"(at most {MAX_INDEXED_COMPLETIONS})"
            ]
        )
    name = job.name
    labels = {LABEL_JOB_NAME: name}
    template = copy.deepcopy(source.template)
    template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    pod = template.setdefault("spec", {})
    pod["subdomain"] = name
    pod["restartPolicy"] = "Never"
    container = next(c for c in pod["containers"] if c.get("name") == DEFAULT_CONTAINER_NAME)
    _launch_with_torchrun(job, container, nodes, f"{name}-0.{name}")
    run = job.spec.run_policy
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": nodes,
        "parallelism": nodes,
        "backoffLimit": run.backoff_limit if run.backoff_limit is not None else DEFAULT_BACKOFF_LIMIT,
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


def _launch_with_torchrun(job: PyTorchJob, container: dict[str, Any], nodes: int, master: str) -> None:
    """Make the container run its program under torchrun, with this pod's node rank."""
    program = [*(container.get("command") or []), *(container.get("args") or [])]
    if not container.get("command"):
        rtype = "Master" if ReplicaType.MASTER in job.spec.pytorch_replica_specs else "Worker"
        raise ValidationError(
            [
                f"spec.pytorchReplicaSpecs.{rtype}.template.spec.containers[{DEFAULT_CONTAINER_NAME}].command: "
                "required for an Indexed Job (torchrun must start the program, and only the image knows its "
                "entrypoint); add e.g. command: [python, train.py]"
            ]
        )
    nproc = job.spec.nproc_per_node or "1"
    nproc = "1" if nproc == "auto" else nproc
    if _is_torchrun(program):
        # torchrun reads a PET_<OPTION> variable for every option it is not given on its command line.
        given = {e.get("name") for e in container.get("env") or [] if isinstance(e, dict)}
        contract: list[dict[str, Any]] = [
            {"name": "PET_NNODES", "value": str(nodes)},
            {"name": "PET_NPROC_PER_NODE", "value": nproc},
            {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": _COMPLETION_INDEX}}},
            {"name": "PET_MASTER_ADDR", "value": master},
            {"name": "PET_MASTER_PORT", "value": str(DEFAULT_PORT)},
        ]
        container["env"] = [*(container.get("env") or []), *(e for e in contract if e["name"] not in given)]
        return
    options = [
        f"--nnodes={nodes}",
        f"--nproc-per-node={nproc}",
        "--node-rank=$(JOB_COMPLETION_INDEX)",
        f"--master-addr={master}",
        f"--master-port={DEFAULT_PORT}",
    ]
    container["command"] = ["torchrun"]
    container["args"] = [*options, *_program_for_torchrun(program)]


def _program_for_torchrun(program: list[str]) -> list[str]:
    """What follows torchrun's options: a script or ``-m module`` torchrun runs with Python itself, anything
    else as a plain command (``--no-python``)."""
    if _PYTHON.match(program[0].rsplit("/", 1)[-1]):
        rest = program[1:]
        while rest[:1] == ["-u"]:
            rest = rest[1:]  # torchrun runs Python unbuffered anyway
        if rest[:1] == ["-m"] and len(rest) > 1:
            return rest
        if rest and not rest[0].startswith("-"):
            return rest
    return ["--no-python", *program]


def _is_torchrun(program: list[str]) -> bool:
    if program[0].rsplit("/", 1)[-1] == "torchrun":
        return True
    return (
        bool(_PYTHON.match(program[0].rsplit("/", 1)[-1]))
        and "-m" in program[1:3]
        and any(m in program[1:4] for m in _TORCHRUN_MODULES)
    )
