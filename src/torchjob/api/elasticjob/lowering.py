"""An ElasticJob lowered to the PyTorchJob that runs it, with what TorchElastic's controller did to its Pods.

TorchElastic's controller prepends ``--rdzv_backend=etcd --rdzv_endpoint=<rdzvEndpoint> --rdzv_id=<name>
--nnodes=<min>:<max>`` to every container's ``args`` and runs the image's entrypoint, the elastic launcher. The
PyTorchJob carries the same as an ``elasticPolicy`` (etcd at ``rdzvEndpoint``, the job's name as the rendezvous
id, min and max), which reaches the launcher as the ``PET_*`` variables it reads for those very flags; so the
container's own ``args`` stay as written, and where the platform cannot reach the etcd (a local run) the group
can meet elsewhere. What else changes is said in a note:

- the training container is named ``pytorch``, as a PyTorchJob's is (TorchElastic's default is
  ``elasticjob-worker``);
- a container that gives no command runs its image's entrypoint on a cluster, as under TorchElastic; where there
  is no image (locally) it runs the elastic launcher, ``python -m torch.distributed.run``
  (``torchjob.io/entrypoint``);
- ``--nproc_per_node`` in the args is the job's ``nprocPerNode`` (torchjob counts the processes it starts).
"""

from __future__ import annotations

import copy
import shlex
from typing import Any

from torchjob.api import extensions
from torchjob.api.elasticjob.types import DEFAULT_CONTAINER_NAME, LAUNCHER, WORKER, ElasticJob
from torchjob.api.errors import ValidationError
from torchjob.api.types import API_VERSION, KIND, RunPolicy
from torchjob.api.types import DEFAULT_CONTAINER_NAME as PYTORCH

_RUN_POLICY_FIELDS = tuple(RunPolicy.model_fields)


def endpoint(value: str) -> tuple[str, int] | None:
    """``host:port`` as TorchElastic's launcher reads ``--rdzv_endpoint`` (an IPv6 host in brackets)."""
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() for c in host):
        return None
    return host, int(port)


def problems(job: ElasticJob) -> list[str]:
    """What TorchElastic's controller would trip over, one line each naming the ElasticJob's field."""
    found = []
    spec = job.spec
    for kind in spec.replica_specs:
        if kind != WORKER:
            found.append(
                f"spec.replicaSpecs.{kind}: not a replica type of an ElasticJob; TorchElastic runs Workers only "
                "(its rendezvous is the etcd at spec.rdzvEndpoint)"
            )
    worker = spec.replica_specs.get(WORKER)
    if worker is None:
        found.append("spec.replicaSpecs.Worker: required: the Workers that run the elastic launcher")
    if endpoint(spec.rdzv_endpoint) is None:
        found.append(
            f"spec.rdzvEndpoint: must be host:port, the etcd TorchElastic's launcher meets at (e.g. "
            f"etcd-service:2379), got {spec.rdzv_endpoint!r}"
        )
    desired = 1 if worker is None or worker.replicas is None else worker.replicas
    low, high = spec.min_replicas or desired, spec.max_replicas or desired
    if low > high:
        found.append(f"spec.minReplicas: must be at most spec.maxReplicas, got {low} > {high}")
    elif worker is not None and not low <= desired <= high:
        found.append(
            f"spec.replicaSpecs.Worker.replicas: must lie within spec.minReplicas and spec.maxReplicas "
            f"({low}–{high}), got {desired}"
        )
    if worker is not None and not _containers(worker.template):
        found.append("spec.replicaSpecs.Worker.template.spec.containers: required: the launcher's container")
    return found


def _containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    spec = template.get("spec") if isinstance(template, dict) else None
    found = spec.get("containers") if isinstance(spec, dict) else None
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def _nproc(args: list[Any]) -> str | None:
    """``--nproc_per_node`` (or ``--nproc-per-node``) as the launcher would read it from ``args``."""
    words = [str(a) for a in args]
    for i, word in enumerate(words):
        for flag in ("--nproc_per_node", "--nproc-per-node"):
            if word.startswith(flag + "="):
                return word.split("=", 1)[1]
            if word == flag and i + 1 < len(words):
                return words[i + 1]
    return None


def lower(job: ElasticJob) -> tuple[dict[str, Any], list[str]]:
    """The PyTorchJob mapping for ``job`` and what was changed on the way (notes); ValidationError where TorchElastic
    itself could not run it."""
    found = problems(job)
    if found:
        raise ValidationError(found)
    spec = job.spec
    worker = spec.replica_specs[WORKER]
    host, port = endpoint(spec.rdzv_endpoint) or ("", 0)
    desired = 1 if worker.replicas is None else worker.replicas
    template = copy.deepcopy(worker.template)
    containers = _containers(template)
    notes = []
    names = [c.get("name") for c in containers]
    if PYTORCH not in names:
        chosen = containers[names.index(DEFAULT_CONTAINER_NAME)] if DEFAULT_CONTAINER_NAME in names else containers[0]
        notes.append(f"ElasticJob {job.name}: container {chosen.get('name')} runs as {PYTORCH}, a PyTorchJob's name")
        chosen["name"] = PYTORCH
    training = next(c for c in containers if c.get("name") == PYTORCH)
    annotations = dict(job.metadata.annotations or {})
    if not training.get("command") and extensions.ENTRYPOINT not in annotations:
        annotations[extensions.ENTRYPOINT] = shlex.join(LAUNCHER)
        notes.append(
            f"ElasticJob {job.name}: no command: on a cluster the image's entrypoint runs, as under TorchElastic; "
            f"locally the elastic launcher, {shlex.join(LAUNCHER)}"
        )
    # What the job's author wrote: not what the API server keeps on its object (uid, resourceVersion...).
    written = {"name": job.metadata.name, "namespace": job.metadata.namespace, "labels": job.metadata.labels}
    metadata: dict[str, Any] = {k: v for k, v in written.items() if v is not None}
    metadata["annotations"] = annotations
    lowered: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "runPolicy": spec.model_dump(
                by_alias=True, exclude_none=True, mode="json", include=set(_RUN_POLICY_FIELDS)
            ),
            "elasticPolicy": {
                "minReplicas": spec.min_replicas or desired,
                "maxReplicas": spec.max_replicas or desired,
                "rdzvBackend": "etcd",
                "rdzvHost": host,
                "rdzvPort": port,
                "rdzvId": job.name,
            },
            "pytorchReplicaSpecs": {
                WORKER: {
                    **worker.model_dump(by_alias=True, exclude_none=True, mode="json", exclude={"template"}),
                    "replicas": desired,
                    "template": template,
                }
            },
        },
    }
    nproc = _nproc(training.get("args") or [])
    if nproc is not None:
        lowered["spec"]["nprocPerNode"] = nproc
    return lowered, notes
