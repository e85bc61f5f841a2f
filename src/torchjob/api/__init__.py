"""The PyTorchJob API (kubeflow.org/v1): wire-format types, Kubeflow's defaults, and validation."""

from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.types import (
    API_VERSION,
    KIND,
    JobCondition,
    PyTorchJob,
    ReplicaSpec,
    ReplicaType,
    RestartPolicy,
)

__all__ = [
    "API_VERSION",
    "KIND",
    "JobCondition",
    "JobFileError",
    "PyTorchJob",
    "ReplicaSpec",
    "ReplicaType",
    "RestartPolicy",
    "ValidationError",
]
