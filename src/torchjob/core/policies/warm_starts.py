"""Whether a job's replicas start warm: forked from an interpreter that has imported torch already (locally, the
job's warm interpreter; in a Pod, its launcher: ``torchjob.launch``). One rule, with the platform's default.

The job's word decides (``torchjob.io/warm-start``: ``"true"`` or ``"false"``); without it, the platform's
default: on for local processes, where the warm interpreter is torchjob's own and falls back cold by itself; off
in Pods, where the launcher replaces the container's command and needs torchjob in the image. In Pods a warm
restart also keeps the Pod for the next attempt, which an elastic group (torchrun's agents restart their own
workers) and an in-place group (its spares are Pods of their own) do not use: those start cold there.
"""

from __future__ import annotations

from torchjob.api import extensions
from torchjob.api.types import PyTorchJob
from torchjob.core import envs

LOCAL_DEFAULT = True
POD_DEFAULT = False


def wanted(job: PyTorchJob, default: bool) -> bool:
    """The job's ``torchjob.io/warm-start`` where it says, else ``default`` (the platform's)."""
    said = job.annotation(extensions.WARM_START)
    return default if said is None else said == "true"


def local_processes(job: PyTorchJob) -> bool:
    """Whether a local job's replicas are forked from its warm interpreter."""
    return wanted(job, LOCAL_DEFAULT)


def pods(job: PyTorchJob) -> bool:
    """Whether a job's Pods start their trainer through the warm launcher, and restart it there."""
    return wanted(job, POD_DEFAULT) and job.spec.elastic_policy is None and not envs.in_place(job)
