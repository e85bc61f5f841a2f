"""Reading a PyTorchJob from a file or a mapping, with errors a user can act on (never a traceback).

A file goes through ``torchjob.api.documents`` (bounded, strict YAML), then the typed model (strict
types and Kubernetes' ranges), Kubeflow's defaults and ``torchjob.api.validation``. What a user should
know but is no error (an input ``status`` that is ignored, as ``kubectl apply`` does) comes back as notes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from torchjob.api import documents, templating
from torchjob.api.defaults import with_defaults
from torchjob.api.elasticjob import reading as elastic_reading
from torchjob.api.elasticjob.types import ELASTICJOB_KIND
from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.trainjob import reading
from torchjob.api.trainjob.types import TRAINJOB_KIND
from torchjob.api.types import API_VERSION, KIND, PyTorchJob
from torchjob.api.validation import validate
from torchjob.api.wire_errors import describe


@dataclass(frozen=True)
class JobInput:
    """A job read from a file: the typed, defaulted job, the document as written (a TrainJob's or an ElasticJob's:
    the PyTorchJob it was lowered to), notes for the user, the kind the file held, and (a TrainJob, an
    ElasticJob) the job as written."""

    job: PyTorchJob
    document: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    kind: str = KIND
    written: dict[str, Any] | None = None


def load_job(path: str | Path, values_path: str | None = None, runtime_paths: Sequence[str] = ()) -> JobInput:
    """Read (``-``: standard input), fill placeholders from ``values_path``, parse, default and validate. A
    TrainJob is lowered to the PyTorchJob that runs it, its runtime found beside it, in ``runtime_paths`` or
    built in."""
    path = str(path)
    source = "standard input" if path == documents.STDIN else path
    text = templating.read_filled(path, values_path)
    line = templating.placeholder_line(text) if values_path is None else None
    if line is not None:
        raise JobFileError(
            f"{source}: still a template (line {line} holds a Jinja2 placeholder); fill it with --values FILE.json"
        )
    return parse_job_input(text, source, reading.read_runtime_files(runtime_paths))


def load_job_file(path: str | Path) -> PyTorchJob:
    """Read, parse, default and validate the PyTorchJob in ``path``."""
    return load_job(path).job


def parse_job_text(text: str, source: str = "<input>") -> PyTorchJob:
    return parse_job_input(text, source).job


def parse_job_input(text: str, source: str = "<input>", runtimes: Sequence[tuple[str, Any]] = ()) -> JobInput:
    found = documents.load_documents(text, source)
    if any(reading.is_trainer_document(d) for d in found):
        lowered = reading.lower_documents(found, source, runtimes)
        job = job_from_mapping(lowered.pytorchjob, source=source)
        return JobInput(job, lowered.pytorchjob, lowered.notes, TRAINJOB_KIND, lowered.trainjob)
    if runtimes:
        raise JobFileError(f"--runtime: only a TrainJob names a runtime; {source} holds no TrainJob")
    if any(elastic_reading.is_elastic_document(d) for d in found):
        elastic = elastic_reading.lower_documents(found, source)
        job = job_from_mapping(elastic.pytorchjob, source=source)
        return JobInput(job, elastic.pytorchjob, elastic.notes, ELASTICJOB_KIND, elastic.elasticjob)
    if not found:
        raise JobFileError(f"{source}: empty; expected a PyTorchJob (apiVersion {API_VERSION}, kind {KIND})")
    if len(found) > 1:
        raise JobFileError(f"{source}: holds {len(found)} YAML documents; expected exactly one PyTorchJob")
    document, notes = documents.without_status(found[0]) if isinstance(found[0], dict) else (found[0], [])
    return JobInput(job_from_mapping(document, source=source), document, notes)


def job_from_mapping(data: Any, source: str = "<input>") -> PyTorchJob:
    """Build a defaulted, validated job from a wire-format mapping (what YAML or the API server holds)."""
    if not isinstance(data, dict):
        raise JobFileError(f"{source}: expected a mapping (a PyTorchJob object), got {type(data).__name__}")
    problems = []
    if data.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: must be {API_VERSION}, got {data.get('apiVersion')!r}")
    if data.get("kind") != KIND:
        problems.append(f"kind: must be {KIND}, got {data.get('kind')!r}")
    problems += _folded_twice(data)
    if problems:
        raise ValidationError(problems)
    try:
        job = PyTorchJob.model_validate(data)
    except pydantic.ValidationError as err:
        raise ValidationError([describe(e) for e in err.errors()]) from None
    job = with_defaults(job)
    validate(job)
    return job


def _folded_twice(data: dict[str, Any]) -> list[str]:
    """Replica types named twice in different cases (``Master`` and ``master``): Kubeflow folds the case, so one
    of the two would be dropped without a word."""
    spec = data.get("spec")
    specs = spec.get("pytorchReplicaSpecs") if isinstance(spec, dict) else None
    if not isinstance(specs, dict):
        return []
    seen: dict[str, str] = {}
    problems = []
    for key in specs:
        folded = str(key).lower()
        if folded in seen:
            problems.append(
                f"spec.pytorchReplicaSpecs: {seen[folded]} and {key} name the same replica type (the case does "
                "not count); keep one"
            )
        seen.setdefault(folded, str(key))
    return problems
