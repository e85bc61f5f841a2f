"""Reading a PyTorchJob from a file or a mapping, with errors a user can act on (never a traceback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import yaml

from torchjob.api.defaults import with_defaults
from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.types import API_VERSION, KIND, PyTorchJob
from torchjob.api.validation import validate


def load_job_file(path: str | Path) -> PyTorchJob:
    """Read, parse, default and validate the PyTorchJob in ``path``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise JobFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise JobFileError(f"{path}: is a directory, expected a PyTorchJob YAML file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise JobFileError(f"{path}: cannot be read ({err})") from None
    return parse_job_text(text, source=str(path))


def parse_job_text(text: str, source: str = "<input>") -> PyTorchJob:
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        where = ""
        mark = getattr(err, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise JobFileError(f"{source}: not valid YAML{where}: {problem}") from None
    if not documents:
        raise JobFileError(f"{source}: empty; expected a PyTorchJob (apiVersion {API_VERSION}, kind {KIND})")
    if len(documents) > 1:
        raise JobFileError(f"{source}: holds {len(documents)} YAML documents; expected exactly one PyTorchJob")
    return job_from_mapping(documents[0], source=source)


def job_from_mapping(data: Any, source: str = "<input>") -> PyTorchJob:
    """Build a defaulted, validated job from a wire-format mapping (what YAML or the API server holds)."""
    if not isinstance(data, dict):
        raise JobFileError(f"{source}: expected a mapping (a PyTorchJob object), got {type(data).__name__}")
    problems = []
    if data.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: must be {API_VERSION}, got {data.get('apiVersion')!r}")
    if data.get("kind") != KIND:
        problems.append(f"kind: must be {KIND}, got {data.get('kind')!r}")
    if problems:
        raise ValidationError(problems)
    try:
        job = PyTorchJob.model_validate(data)
    except pydantic.ValidationError as err:
        raise ValidationError([_describe(e) for e in err.errors()]) from None
    job = with_defaults(job)
    validate(job)
    return job


def _describe(error: Any) -> str:
    """One line for one pydantic error: the wire path, what is expected, what was given."""
    parts: list[str] = []
    for item in error["loc"]:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        elif item == "[key]":
            continue
        else:
            parts.append(str(item))
    path = ".".join(parts) or "(top level)"
    kind = error["type"]
    given = error.get("input")
    if kind == "extra_forbidden":
        return f"{path}: unknown field"
    if kind == "missing":
        return f"{path}: required"
    if kind == "enum" and error["loc"] and error["loc"][-1] == "[key]":
        return f"{path}: unknown replica type {given!r}; expected Master or Worker"
    message = error["msg"]
    if message.startswith("Input should be"):
        message = "must be" + message[len("Input should be") :]
    return f"{path}: {message}, got {given!r}"
