"""In-place repair on Kubernetes, as manifests and patches (pure): warm spare Pods, and a spare's promotion.

A spare is a Pod ``<job>-spare-<attempt>-<k>`` running a Worker's template with no place in the group
(``TORCHJOB_SPARE`` set, no rank), labelled ``torchjob.io/role: spare``: never taken for a replica. Every
Pod of such a job meets at the rendezvous store Pod torchjob hosts (``TORCHJOB_STORE``), which outlives
every member, and talks to the operator through its report endpoints (``torchjob.train.channel``).

Repairing gives the spare the lost replica's labels (type, index; the attempt stays), so the replica's
Service and the operator's next observation see it as that replica; the lost Pod is deleted. The spare
Pod keeps its own name: a Pod cannot be renamed, and nothing in the group needs the name, since members
meet at the store and address each other by Pod IP.
"""

from __future__ import annotations

import copy
from typing import Any

from torchjob import worker_files
from torchjob.api.types import PyTorchJob
from torchjob.backends.kubernetes.mapping import LABEL_ROLE, pod_manifest, store_name, store_port
from torchjob.core import replicas
from torchjob.core.envs import holds_a_place
from torchjob.core.replicas import ROLE_SPARE, ReplicaId, expected_replicas

# How long a spare Pod that is no longer wanted (the job ended, was suspended, has spares enough) may take to stop.
# A spare holds no state, and it may ignore SIGTERM: in a container its process is PID 1, which the kernel does
# not end on a signal it has no handler for. Its Pod then stayed Terminating for the whole grace period (30 s by
# default), holding what it requested (a GPU another job's Pods may wait for).
SPARE_GRACE_SECONDS = 1


def store_address(job: PyTorchJob) -> str:
    """``TORCHJOB_STORE`` for every member and spare of an in-place job."""
    return f"{store_name(job)}:{store_port(job)}"


def spare_name(job: PyTorchJob, attempt: int, index: int) -> str:
    return f"{job.name}-spare-{attempt}-{index}"


def spare_pod_manifest(
    job: PyTorchJob,
    name: str,
    attempt: int,
    report_url: str | None,
    at_store: bool = False,
    report_ca: str | None = None,
) -> dict[str, Any]:
    """A warm spare for ``attempt``: the last Worker's Pod, without its place in the group."""
    model = expected_replicas(job)[-1]  # a Worker when there are any
    pod = pod_manifest(job, model, attempt, report_url, at_store, report_ca)
    pod["metadata"]["name"] = name
    pod["metadata"]["labels"] = spare_labels(job, attempt)
    for container in pod["spec"].get("containers") or []:
        env = [e for e in container.get("env") or [] if not holds_a_place(str(e.get("name", "")))]
        container["env"] = [*env, {"name": worker_files.ENV_SPARE, "value": name}]
    return with_store(pod, job)


def spare_labels(job: PyTorchJob, attempt: int) -> dict[str, str]:
    """Selected by the job's Pod listing, but with no replica labels: a spare is never taken for a replica (nor
    listed by Kubeflow's SDK, which selects Kubeflow's job-name label; its promotion adds it)."""
    return {
        replicas.LABEL_OPERATOR: replicas.OPERATOR_NAME,
        replicas.LABEL_JOB: job.name,
        replicas.LABEL_ATTEMPT: str(attempt),
        LABEL_ROLE: ROLE_SPARE,
    }


def promotion_patch(job: PyTorchJob, replica: ReplicaId, attempt: int) -> dict[str, Any]:
    """The merge patch that makes a spare Pod ``replica`` of ``attempt`` (its role label removed)."""
    return {"metadata": {"labels": {**replicas.labels(job, replica, attempt), LABEL_ROLE: None}}}


def with_store(pod: dict[str, Any], job: PyTorchJob) -> dict[str, Any]:
    """A replica's Pod of an in-place job: it meets its group at the store torchjob hosts."""
    pod = copy.deepcopy(pod)
    for container in pod["spec"].get("containers") or []:
        container.setdefault("env", []).append({"name": worker_files.ENV_STORE, "value": store_address(job)})
    return pod


def free_spare_name(job: PyTorchJob, attempt: int, taken: set[str]) -> str:
    """The first spare name of ``attempt`` not in ``taken``, which it joins."""
    index = 0
    while spare_name(job, attempt, index) in taken:
        index += 1
    name = spare_name(job, attempt, index)
    taken.add(name)
    return name
