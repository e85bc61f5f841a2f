"""Serving TorchElastic's ElasticJobs on a cluster: each runs as a PyTorchJob it owns (``owned_runs.py``), lowered
as ``torchjob run`` lowers it (``api/elasticjob``), its launchers meeting at the etcd it names.

Its Worker count is passed on while it runs (``kubectl scale elasticjob``, the scale subresource: within
``minReplicas`` and ``maxReplicas`` the group grows or shrinks without a restart), and ``suspend``. Its status is
Kubeflow's common JobStatus, as TorchElastic's controller wrote it (conditions, replica counts, start and end),
with torchjob's own fields beside it (attempts, restarts, membership changes).
"""

from __future__ import annotations

import logging
from typing import Any

from torchjob.api.elasticjob import reading
from torchjob.api.elasticjob.types import API_GROUP, ELASTICJOB_KIND, WORKER
from torchjob.api.types import JobStatus
from torchjob.backends.kubernetes.cluster import ElasticJobResource
from torchjob.controller.owned_runs import OwnedRuns
from torchjob.core.replicas import LABEL_ELASTICJOB

log = logging.getLogger("torchjob.operator")


class ElasticJobs(OwnedRuns):
    kind, group, resource, label = ELASTICJOB_KIND, API_GROUP, ElasticJobResource, LABEL_ELASTICJOB

    def lower(self, wire: dict[str, Any]) -> dict[str, Any]:
        meta = wire["metadata"]
        source = f"ElasticJob {meta['namespace']}/{meta['name']}"
        lowered: dict[str, Any] = reading.lower_documents([wire], source).pytorchjob
        return lowered

    def status(self, child: JobStatus, previous: dict[str, Any], now: str) -> dict[str, Any]:
        found: dict[str, Any] = child.model_dump(by_alias=True, exclude_none=True, mode="json")
        return found

    def changes(self, wire: dict[str, Any], child: dict[str, Any]) -> list[dict[str, Any]]:
        spec, child_spec = wire.get("spec") or {}, child.get("spec") or {}
        found: list[dict[str, Any]] = []
        wanted = ((spec.get("replicaSpecs") or {}).get(WORKER) or {}).get("replicas")
        running = ((child_spec.get("pytorchReplicaSpecs") or {}).get(WORKER) or {}).get("replicas")
        policy = child_spec.get("elasticPolicy") or {}
        if isinstance(wanted, int) and wanted != running:
            low, high = int(policy.get("minReplicas") or 1), int(policy.get("maxReplicas") or wanted)
            if low <= wanted <= high:
                found.append({"op": "replace", "path": f"/spec/pytorchReplicaSpecs/{WORKER}/replicas", "value": wanted})
            else:
                meta = wire["metadata"]
                log.warning(
                    "%s/%s: ElasticJob scaled to %d Workers, outside its minReplicas and maxReplicas (%d–%d): ignored",
                    meta["namespace"],
                    meta["name"],
                    wanted,
                    low,
                    high,
                )
        suspend = bool(spec.get("suspend"))
        if bool((child_spec.get("runPolicy") or {}).get("suspend")) != suspend:
            found.append(
                {
                    "op": "add",
                    "path": "/spec/runPolicy",
                    "value": {**child_spec.get("runPolicy", {}), "suspend": suspend},
                }
            )
        return found
