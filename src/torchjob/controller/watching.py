"""What the operator's watches key their events by (a job, or the job a Pod belongs to), and an API or
connection error in one log line."""

from __future__ import annotations

from typing import Any

from lightkube import ApiError

from torchjob.backends.kubernetes.cluster import JobKey
from torchjob.core import replicas


def job_key(obj: dict[str, Any]) -> JobKey | None:
    meta = obj.get("metadata") or {}
    return (meta["namespace"], meta["name"]) if meta.get("name") else None


def pod_owner_key(obj: dict[str, Any]) -> JobKey | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    job = labels.get(replicas.LABEL_JOB) or labels.get(replicas.LABEL_JOB_NAME)
    return (meta["namespace"], job) if job else None


def one_line(err: BaseException) -> str:
    """An API or connection error in one log line."""
    if isinstance(err, ApiError):
        return f"API error {err.status.code}: {err.status.message}"
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def namespace_terminating(err: BaseException) -> bool:
    """The API server refused to create an object in a namespace being deleted (cause ``NamespaceTerminating``)."""
    if not isinstance(err, ApiError) or err.status.details is None:
        return False
    return any(cause.reason == "NamespaceTerminating" for cause in err.status.details.causes or [])
