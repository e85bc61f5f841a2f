"""Reading an ElasticJob: the one document of a job file, typed strictly, then lowered to the PyTorchJob mapping
the planner drives. Every problem is one line naming the file's field, as for a PyTorchJob."""

from __future__ import annotations

from typing import Any, NamedTuple

import pydantic

from torchjob.api import documents
from torchjob.api.elasticjob import lowering
from torchjob.api.elasticjob.types import API_GROUP, API_VERSION, ELASTICJOB_KIND, ElasticJob
from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.wire_errors import describe


def is_elastic_document(document: Any) -> bool:
    """Whether ``document`` belongs to TorchElastic's API group."""
    return isinstance(document, dict) and str(document.get("apiVersion", "")).split("/")[0] == API_GROUP


class Lowered(NamedTuple):
    """An ElasticJob read: the PyTorchJob mapping that runs it, notes for the user, and the ElasticJob as written
    (less any status)."""

    pytorchjob: dict[str, Any]
    notes: list[str]
    elasticjob: dict[str, Any]


def lower_documents(found: list[Any], source: str) -> Lowered:
    if len(found) != 1:
        raise JobFileError(f"{source}: holds {len(found)} YAML documents; expected exactly one ElasticJob")
    document = found[0]
    if not isinstance(document, dict) or document.get("kind") != ELASTICJOB_KIND:
        kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
        raise JobFileError(f"{source}: holds a {kind}; expected an ElasticJob ({API_VERSION})")
    document, notes = documents.without_status(document)
    if document.get("apiVersion") != API_VERSION:
        raise ValidationError([f"apiVersion: must be {API_VERSION}, got {document.get('apiVersion')!r}"])
    try:
        job = ElasticJob.model_validate(document)
    except pydantic.ValidationError as err:
        raise ValidationError([describe(e) for e in err.errors()]) from None
    lowered, more = lowering.lower(job)
    policy = lowered["spec"]["elasticPolicy"]
    workers = lowered["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    notes.append(
        f"ElasticJob {job.name}: {workers} Worker(s), {policy['minReplicas']}–{policy['maxReplicas']} allowed, "
        f"meeting at the etcd at {job.spec.rdzv_endpoint}; run as a PyTorchJob"
    )
    return Lowered(lowered, [*notes, *more], document)
