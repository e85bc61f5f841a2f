"""Serving Kubeflow Trainer's TrainJobs on a cluster: each runs as a PyTorchJob it owns (``owned_runs.py``), and its
status is kept in Trainer's shape from that PyTorchJob's.

A TrainJob is read with its runtime (a ClusterTrainingRuntime or TrainingRuntime from the API server, else the
built-in ``torch-distributed``). ``suspend`` is passed on (Kueue's admission), with the runtime patches Kueue
writes while the job is suspended, and a ``managedBy`` of MultiKueue is left alone.
"""

from __future__ import annotations

from typing import Any

from torchjob.api.trainjob import reading
from torchjob.api.trainjob.status import trainjob_status
from torchjob.api.trainjob.types import API_GROUP, MULTIKUEUE, RUNTIME_KIND, TRAINJOB_KIND
from torchjob.api.types import JobStatus
from torchjob.backends.kubernetes.cluster import ClusterRuntimeResource, RuntimeResource, TrainJobResource
from torchjob.controller.owned_runs import OwnedRuns
from torchjob.core.replicas import LABEL_TRAINJOB


class TrainJobs(OwnedRuns):
    kind, group, resource, label = TRAINJOB_KIND, API_GROUP, TrainJobResource, LABEL_TRAINJOB

    def skipped(self, wire: dict[str, Any]) -> bool:
        return (wire.get("spec") or {}).get("managedBy") == MULTIKUEUE

    def lower(self, wire: dict[str, Any]) -> dict[str, Any]:
        meta = wire["metadata"]
        source = f"TrainJob {meta['namespace']}/{meta['name']}"
        lowered: dict[str, Any] = reading.lower_documents([wire], source, self._runtimes(wire)).pytorchjob
        return lowered

    def status(self, child: JobStatus, previous: dict[str, Any], now: str) -> dict[str, Any]:
        return trainjob_status(child, previous, now)

    def changes(self, wire: dict[str, Any], child: dict[str, Any]) -> list[dict[str, Any]]:
        """Pass ``suspend`` on, and while the PyTorchJob has started nothing, the TrainJob's runtime patches too:
        Kueue writes its admission (the flavor's node selector and tolerations, its labels) into
        ``spec.runtimePatches`` of the suspended TrainJob just before it resumes it, as Trainer's JobSet takes
        them while suspended; the replica templates are lowered again and replaced whole, so that what Kueue
        takes back on a stop goes too."""
        suspend = bool((wire.get("spec") or {}).get("suspend"))
        child_spec = child.get("spec") or {}
        was_suspended = bool((child_spec.get("runPolicy") or {}).get("suspend"))
        found: list[dict[str, Any]] = []
        if was_suspended:
            lowered = self.lowered(wire)
            replicas = (lowered or {}).get("spec", {}).get("pytorchReplicaSpecs")
            if replicas is not None and replicas != child_spec.get("pytorchReplicaSpecs"):
                found.append({"op": "replace", "path": "/spec/pytorchReplicaSpecs", "value": replicas})
        if was_suspended != suspend:
            run_policy = {**(child_spec.get("runPolicy") or {}), "suspend": suspend}
            found.append({"op": "add", "path": "/spec/runPolicy", "value": run_policy})
        return found

    def _runtimes(self, wire: dict[str, Any]) -> list[tuple[str, Any]]:
        """The runtime the TrainJob names, from the API server, where it is there (else the built-in one is
        looked for, and a missing runtime is named)."""
        ref = (wire.get("spec") or {}).get("runtimeRef") or {}
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
            return []  # the TrainJob's own validation names the problem
        if ref.get("kind") == RUNTIME_KIND:
            found = self.get(RuntimeResource, ref["name"], wire["metadata"]["namespace"])
        else:
            found = self.get(ClusterRuntimeResource, ref["name"], None)
        return [("", found)] if found is not None else []
