"""The Python SDK: submit, inspect, follow and delete jobs. The CLI is a thin layer over it.

Names are imported on first use: ``torchjob.sdk.errors`` alone must not pay for the clients.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchjob.sdk.errors import JobExistsError, JobNotFoundError, SdkError
    from torchjob.sdk.local_client import LocalClient
    from torchjob.sdk.summary import JobSummary

__all__ = ["JobExistsError", "JobNotFoundError", "JobSummary", "LocalClient", "SdkError"]
_HOMES = {
    "JobExistsError": "torchjob.sdk.errors",
    "JobNotFoundError": "torchjob.sdk.errors",
    "SdkError": "torchjob.sdk.errors",
    "LocalClient": "torchjob.sdk.local_client",
    "JobSummary": "torchjob.sdk.summary",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'torchjob.sdk' has no attribute {name!r}")
