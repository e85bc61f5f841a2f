"""backoffLimit: how many group restarts a job may take before it is Failed.

Every restart of the group counts, whatever the restart policy (Kubeflow never trips the limit under
ExitCode because recreated pods reset restartCount: kubeflow/trainer #2045, #2342). Restarts caused by the
platform (eviction, preemption) do not count: the job did nothing wrong.
"""

from __future__ import annotations

from torchjob.api import extensions
from torchjob.api.types import PyTorchJob


def backoff_limit(job: PyTorchJob) -> int:
    limit = job.spec.run_policy.backoff_limit
    return extensions.DEFAULT_BACKOFF_LIMIT if limit is None else limit


def may_restart(job: PyTorchJob, restarts_so_far: int) -> bool:
    return restarts_so_far < backoff_limit(job)
