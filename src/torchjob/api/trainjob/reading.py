"""Reading a TrainJob: the job file's documents (a TrainJob, and any runtimes written beside it), the runtimes
given with ``--runtime FILE``, each typed strictly, then lowered to the PyTorchJob mapping the planner drives.

Every problem is one line naming the file, the object and the field, as for a PyTorchJob.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

import pydantic

from torchjob.api import documents
from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.trainjob import lowering, runtimes
from torchjob.api.trainjob.types import API_GROUP, API_VERSION, RUNTIME_KINDS, TRAINJOB_KIND, TrainingRuntime, TrainJob
from torchjob.api.wire_errors import describe

Model = TypeVar("Model", TrainJob, TrainingRuntime)


def is_trainer_document(document: Any) -> bool:
    """Whether ``document`` belongs to Kubeflow Trainer's API group (a TrainJob or a runtime)."""
    return isinstance(document, dict) and str(document.get("apiVersion", "")).split("/")[0] == API_GROUP


def read_runtime_files(paths: Sequence[str]) -> list[tuple[str, Any]]:
    """Every document of every ``--runtime`` file, with where it came from (``--runtime FILE``)."""
    found = []
    for path in paths:
        try:
            found += [(f"--runtime {path}: ", d) for d in documents.load_documents(documents.read_text(path), path)]
        except JobFileError as err:
            raise JobFileError(f"--runtime {err}") from None
    return found


class Lowered(NamedTuple):
    """A TrainJob read: the PyTorchJob mapping that runs it, notes for the user, and the TrainJob as written
    (less any status)."""

    pytorchjob: dict[str, Any]
    notes: list[str]
    trainjob: dict[str, Any]


def lower_documents(found: list[Any], source: str, given: Sequence[tuple[str, Any]] = ()) -> Lowered:
    """The PyTorchJob mapping for the one TrainJob in ``found`` (runtimes may stand beside it), and notes."""
    trainjobs, runtime_documents = [], [*given]
    for document in found:
        kind = document.get("kind") if isinstance(document, dict) else None
        if kind == TRAINJOB_KIND and is_trainer_document(document):
            trainjobs.append(document)
        elif kind in RUNTIME_KINDS and is_trainer_document(document):
            runtime_documents.append(("", document))
        else:
            raise JobFileError(
                f"{source}: holds a {kind or type(document).__name__}; expected one TrainJob "
                "(and, if you like, the training runtimes it names)"
            )
    if len(trainjobs) != 1:
        raise JobFileError(f"{source}: holds {len(trainjobs)} TrainJobs; expected exactly one")
    document, notes = documents.without_status(trainjobs[0])
    job = _typed(TrainJob, document, "")
    given_runtimes = [_typed(TrainingRuntime, d, f"{where}{_named(d)}: ") for where, d in runtime_documents]
    namespace = job.metadata.namespace or "default"
    runtime, origin = runtimes.resolve(job.spec.runtime_ref, namespace, given_runtimes)
    lowered, more = lowering.lower(job, runtime)
    replicas = lowered["spec"]["pytorchReplicaSpecs"]
    nodes = sum(r["replicas"] for r in replicas.values())
    notes.append(
        f"TrainJob {job.name}: {nodes} node(s) × {lowered['spec']['nprocPerNode']} process(es), from "
        f"{runtime.kind} {runtime.name} ({origin}); run as a PyTorchJob (Master = node 0)"
    )
    return Lowered(lowered, [*notes, *more], document)


def _typed(model: type[Model], document: Any, prefix: str) -> Model:
    if not isinstance(document, dict):
        raise JobFileError(f"{prefix}expected a mapping, got {type(document).__name__}")
    if document.get("apiVersion") != API_VERSION:
        raise ValidationError([f"{prefix}apiVersion: must be {API_VERSION}, got {document.get('apiVersion')!r}"])
    try:
        return model.model_validate(document)
    except pydantic.ValidationError as err:
        raise ValidationError([prefix + describe(e) for e in err.errors()]) from None


def _named(document: Any) -> str:
    metadata = document.get("metadata") if isinstance(document, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return f"{document.get('kind') if isinstance(document, dict) else 'runtime'} {name or '(no name)'}"
