"""The Kubernetes backend is one object for the operator's workers, which reconcile several jobs at once: what a
pass's observe() saw is what the same pass's execute() acts on, whatever another job's pass observed meanwhile."""

from __future__ import annotations

import threading
from typing import Any

from torchjob.api.types import ReplicaType
from torchjob.backends.kubernetes import mapping
from torchjob.backends.kubernetes.backend import KubernetesBackend
from torchjob.core.actions import DeleteReplica, DeleteSpare
from torchjob.core.replicas import ReplicaId
from torchjob.testing import make_job

MASTER = ReplicaId(ReplicaType.MASTER, 0)


class Pods:
    """The API server's Pods, by namespace, as lightkube's client lists and deletes them."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.deleted: list[tuple[str, str]] = []
        self.grace: dict[str, int | None] = {}

    def list(
        self, kind: type[Any], namespace: str, labels: dict[str, Any], chunk_size: int | None = None
    ) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["metadata"]["namespace"] == namespace]

    def delete(self, kind: type[Any], name: str, namespace: str, grace_period: int | None = None) -> None:
        self.deleted.append((namespace, name))
        self.grace[name] = grace_period


def _job(namespace: str, name: str) -> Any:
    job = make_job(name).master().workers(1).build()
    metadata = job.metadata.model_copy(update={"namespace": namespace, "uid": f"uid-{namespace}"})
    return job.model_copy(update={"metadata": metadata})


def test_a_pass_acts_on_the_pods_it_observed_while_another_job_is_observed_in_another_thread() -> None:
    team_a, team_b = _job("team-a", "mnist"), _job("team-b", "resnet")
    pods = [mapping.pod_manifest(job, MASTER, 0) for job in (team_a, team_b)]
    for pod, job in zip(pods, (team_a, team_b), strict=True):
        pod["metadata"]["ownerReferences"] = [{"uid": job.metadata.uid}]
        pod["status"] = {"phase": "Pending"}
    client = Pods(pods)
    backend = KubernetesBackend(client)  # type: ignore[arg-type]
    backend.observe(team_a)
    other = threading.Thread(target=backend.observe, args=(team_b,))  # another worker, another job
    other.start()
    other.join()
    backend.execute(team_a, [DeleteReplica(MASTER, 0, "a group restart")])
    assert client.deleted == [("team-a", "mnist-master-0")]


def test_a_spare_no_longer_wanted_is_given_a_second_to_stop() -> None:
    # Its process may be PID 1 in its container, deaf to SIGTERM: the default 30 s would hold its Pod's resources.
    job = _job("team-a", "mnist")
    client = Pods([])
    backend = KubernetesBackend(client)  # type: ignore[arg-type]
    backend.observe(job)
    backend.execute(job, [DeleteSpare("mnist-spare-0-0", "the job has finished")])
    assert client.deleted == [("team-a", "mnist-spare-0-0")] and client.grace["mnist-spare-0-0"] == 1


def test_a_pass_over_forgets_the_pods_it_read() -> None:
    # Each of the operator's worker threads would otherwise hold its last job's Pods (a thousand of them at
    # 45 kB each) until its next pass.
    job = _job("team-a", "mnist")
    pod = mapping.pod_manifest(job, MASTER, 0)
    pod["metadata"]["ownerReferences"] = [{"uid": job.metadata.uid}]
    pod["status"] = {"phase": "Running"}
    client = Pods([pod])
    backend = KubernetesBackend(client)  # type: ignore[arg-type]
    backend.observe(job)
    backend.end_pass()
    backend.execute(job, [DeleteReplica(MASTER, 0, "a group restart")])
    assert client.deleted == []  # nothing read in this pass: nothing to act on
