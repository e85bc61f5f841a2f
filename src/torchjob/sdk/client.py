"""``JobClient``: the verbs both clients offer, with the same shapes, so the CLI treats local and cluster jobs
alike. ``torchjob.sdk.local_client.LocalClient`` and ``torchjob.sdk.cluster_client.ClusterClient`` implement it.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from torchjob.api.scaling import workers_problem
from torchjob.core import conditions
from torchjob.sdk.summary import JobSummary

if TYPE_CHECKING:
    from torchjob.api.types import PyTorchJob


class JobClient(Protocol):
    def get_wire(self, name: str) -> dict[str, Any]:
        """The job with its status, in Kubeflow's wire format."""
        ...

    def list(self) -> builtins.list[JobSummary]:
        """A row per job."""
        ...

    def state(self, name: str) -> str:
        """The job's State (its last condition's type; empty before the first)."""
        ...

    def logs(self, name: str, replica: str | None = None, attempt: int | None = None) -> str:
        """What the replicas printed so far, each line prefixed ``[replica]`` unless one replica is asked for."""
        ...

    def follow(self, name: str, replica: str | None = None, poll: float = ...) -> Iterator[tuple[str, str]]:
        """(replica, line) as replicas write, across restarts, until the job has ended."""
        ...

    def wait(self, name: str, timeout: float | None = None, poll: float = ...) -> dict[str, Any]:
        """Block until the job has ended; the job as it ended, in wire format."""
        ...

    def scale(self, name: str, workers: int) -> None:
        """Ask a running elastic job for ``workers`` Workers."""
        ...

    def delete(self, name: str) -> None:
        """Remove the job (a running one is stopped first)."""
        ...


def scale_problem(job: PyTorchJob, workers: int) -> str | None:
    """Why ``job`` cannot be scaled to ``workers`` Workers now, in one line; None when it can."""
    problem = workers_problem(job, workers)
    if problem is None and conditions.is_finished(job.status):
        problem = f"job {job.name!r} has already finished ({conditions.state(job.status)})"
    return problem
