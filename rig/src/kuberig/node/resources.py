"""Extended resources a node advertises, as Kubernetes documents it ("Advertise Extended Resources for a
Node"): a patch of the Node's status. ``--fake-gpus K`` lets jobs written for GPU nodes (``nvidia.com/gpu``
limits, as Kubeflow's examples have) schedule on CPU nodes; their scripts fall back to the CPU."""

from __future__ import annotations

import json

from kuberig.kubectl import Kubectl

GPU = "nvidia.com/gpu"


def advertise(api: Kubectl, node: str, resource: str, count: int) -> None:
    """Set ``resource`` to ``count`` in the node's capacity and allocatable (0 removes it)."""
    path = resource.replace("~", "~0").replace("/", "~1")
    if count > 0:
        ops = [
            {"op": "add", "path": f"/status/{part}/{path}", "value": str(count)} for part in ("capacity", "allocatable")
        ]
    else:
        found = api.kubectl_json("get", "node", node).get("status", {})
        ops = [
            {"op": "remove", "path": f"/status/{part}/{path}"}
            for part in ("capacity", "allocatable")
            if resource in found.get(part, {})
        ]
        if not ops:
            return
    api.kubectl("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(ops))
