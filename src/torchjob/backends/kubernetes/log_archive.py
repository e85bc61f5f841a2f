"""An ended attempt's output, kept after its Pods are gone: one ConfigMap per attempt, owned by the job.

Before the operator deletes an attempt's Pods (a group restart, a finished job's cleanPodPolicy), it reads
the last ``TAIL_LINES`` lines of each Pod's ``pytorch`` container and files them, gzip-compressed, under
``<replica>.log.gz`` in the ConfigMap ``<job>-logs-<attempt>``. The job owns it, so deleting the job deletes
it. A ConfigMap holds at most 1 MiB: each replica gets an equal share of ``BUDGET_BYTES``, and a log that
compresses to more keeps its newest lines. ``torchjob logs --cluster NAME --attempt N`` reads it back;
``kubectl logs`` still shows the current attempt.
"""

from __future__ import annotations

import base64
import gzip
from typing import Any

from torchjob.api.types import PyTorchJob
from torchjob.backends.kubernetes.mapping import owner_reference
from torchjob.core import replicas
from torchjob.core.replicas import expected_replicas

TAIL_LINES = 5000
BUDGET_BYTES = 900 * 1024
SUFFIX = ".log.gz"
ROLE_LOGS = "attempt-logs"


def archive_name(job_name: str, attempt: int) -> str:
    return f"{job_name}-logs-{attempt}"


def pack(text: str, budget: int) -> str:
    """``text`` gzipped and base64-encoded in at most ``budget`` bytes: its newest lines when it is longer."""
    lines = text.splitlines(keepends=True)
    while True:
        packed = base64.b64encode(gzip.compress("".join(lines).encode(), mtime=0)).decode()
        if len(packed) <= budget or len(lines) <= 1:
            return packed
        lines = lines[len(lines) // 4 :]  # drop the oldest quarter and try again


def unpack(packed: str) -> str:
    return gzip.decompress(base64.b64decode(packed)).decode(errors="replace")


def share(job: PyTorchJob) -> int:
    """What one replica's log may take of the attempt's ConfigMap."""
    return BUDGET_BYTES // max(1, len(expected_replicas(job)))


def manifest(job: PyTorchJob, attempt: int, logs: dict[str, str]) -> dict[str, Any]:
    """The attempt's ConfigMap with ``logs`` (replica → text) in it."""
    budget = share(job)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": archive_name(job.name, attempt),
            "namespace": job.namespace,
            "labels": {
                replicas.LABEL_JOB_NAME: job.name,
                replicas.LABEL_ATTEMPT: str(attempt),
                replicas.LABEL_ROLE: ROLE_LOGS,
            },
            "ownerReferences": [owner_reference(job)],
        },
        "binaryData": {f"{replica}{SUFFIX}": pack(text, budget) for replica, text in logs.items()},
    }


def read(configmap: dict[str, Any]) -> dict[str, str]:
    """replica → its kept output, from an attempt's ConfigMap."""
    data = configmap.get("binaryData") or {}
    return {key.removesuffix(SUFFIX): unpack(value) for key, value in sorted(data.items()) if key.endswith(SUFFIX)}
