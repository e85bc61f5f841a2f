"""Fluent builders: ``make_job("mnist").master().workers(2).restart_policy("ExitCode").build()``.

``build()`` returns a defaulted, validated PyTorchJob; ``wire()`` the mapping a YAML file would hold.
Observation helpers (``running``, ``succeeded``, ``failed``) make planner tables short to read.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from torchjob.api.loading import job_from_mapping
from torchjob.api.types import PyTorchJob, ReplicaType
from torchjob.core.observed import Phase, PlatformReason, ReplicaObservation
from torchjob.core.replicas import ReplicaId


class JobBuilder:
    def __init__(self, name: str) -> None:
        self._data: dict[str, Any] = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {}},
        }
        self._command: list[str] = ["python", "train.py"]

    def master(self, **fields: Any) -> JobBuilder:
        return self._replica("Master", 1, fields)

    def workers(self, count: int, **fields: Any) -> JobBuilder:
        return self._replica("Worker", count, fields)

    def command(self, *argv: str) -> JobBuilder:
        self._command = list(argv)
        for spec in self._specs().values():
            spec["template"]["spec"]["containers"][0]["command"] = list(argv)
        return self

    def env(self, **values: str) -> JobBuilder:
        for spec in self._specs().values():
            container = spec["template"]["spec"]["containers"][0]
            container.setdefault("env", []).extend({"name": k, "value": v} for k, v in values.items())
        return self

    def restart_policy(self, policy: str) -> JobBuilder:
        for spec in self._specs().values():
            spec["restartPolicy"] = policy
        return self

    def run_policy(self, **fields: Any) -> JobBuilder:
        self._data["spec"].setdefault("runPolicy", {}).update(fields)
        return self

    def elastic(self, **fields: Any) -> JobBuilder:
        self._data["spec"]["elasticPolicy"] = fields
        return self

    def annotate(self, **annotations: str) -> JobBuilder:
        self._data["metadata"].setdefault("annotations", {}).update(annotations)
        return self

    def spec(self, **fields: Any) -> JobBuilder:
        self._data["spec"].update(fields)
        return self

    def wire(self) -> dict[str, Any]:
        return copy.deepcopy(self._data)

    def build(self) -> PyTorchJob:
        return job_from_mapping(self.wire())

    def _specs(self) -> dict[str, Any]:
        specs: dict[str, Any] = self._data["spec"]["pytorchReplicaSpecs"]
        return specs

    def _replica(self, rtype: str, count: int, fields: dict[str, Any]) -> JobBuilder:
        container = {"name": "pytorch", "image": "example/train:1", "command": list(self._command)}
        self._specs()[rtype] = {
            "replicas": count,
            "template": {"spec": {"containers": [container]}},
            **fields,
        }
        return self


def make_job(name: str = "test-job") -> JobBuilder:
    return JobBuilder(name)


def _replica_id(name: str) -> ReplicaId:
    kind, _, index = name.rpartition("-")
    return ReplicaId(ReplicaType(kind.capitalize()), int(index))


def running(name: str, attempt: int = 0, stopping: bool = False) -> ReplicaObservation:
    return ReplicaObservation(_replica_id(name), attempt, Phase.RUNNING, stopping=stopping)


def pending(name: str, attempt: int = 0) -> ReplicaObservation:
    return ReplicaObservation(_replica_id(name), attempt, Phase.PENDING)


def succeeded(name: str, attempt: int = 0) -> ReplicaObservation:
    return ReplicaObservation(_replica_id(name), attempt, Phase.SUCCEEDED, exit_code=0)


def failed(
    name: str,
    attempt: int = 0,
    exit_code: int | None = 1,
    signal: int | None = None,
    reason: str | None = None,
    message: str | None = None,
    at: datetime | None = None,
    stopping: bool = False,
) -> ReplicaObservation:
    return ReplicaObservation(
        _replica_id(name),
        attempt,
        Phase.FAILED,
        exit_code=None if signal else exit_code,
        signal=signal,
        reason=PlatformReason(reason) if reason else None,
        message=message,
        finished_at=at,
        stopping=stopping,
    )
