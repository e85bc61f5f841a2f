"""The Python SDK: submit, inspect, follow and delete jobs. The CLI is a thin layer over it."""

from torchjob.sdk.errors import JobExistsError, JobNotFoundError, SdkError
from torchjob.sdk.local import JobSummary, LocalClient

__all__ = ["JobExistsError", "JobNotFoundError", "JobSummary", "LocalClient", "SdkError"]
