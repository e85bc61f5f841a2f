"""An elastic job on a real node: torchrun agents in Pods meet at torchjob's rendezvous store Pod, lose a
member, and carry on without a restart."""

from __future__ import annotations

import json
import time

from kuberig import Cluster
from tests.node.conftest import wait_for_condition
from tests.support.images import TEST_SCRIPTS
from tests.support.operator import OperatorProcess


def test_an_elastic_job_loses_a_pod_and_carries_on(cluster: Cluster, node_operator: OperatorProcess) -> None:
    namespace = cluster.namespace("elastic")
    data = cluster.claim(namespace, "data")
    container = {
        "name": "pytorch",
        "image": TEST_SCRIPTS,
        "command": ["torchrun", "elastic_train.py", "--steps", "80", "--step-seconds", "0.25"],
        "env": [{"name": "TORCHJOB_OUTPUT_DIR", "value": "/data"}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    pod = {"containers": [container], "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}
    cluster.apply(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "stretchy", "namespace": namespace},
            "spec": {
                "nprocPerNode": "1",  # "auto" is a process per CPU on a CPU-only node
                "elasticPolicy": {"minReplicas": 1, "maxReplicas": 2, "rdzvBackend": "c10d"},
                "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": pod}}},
            },
        }
    )
    rounds = data / "rounds.jsonl"

    def joined() -> list[dict[str, object]]:
        return [json.loads(line) for line in rounds.read_text().splitlines()] if rounds.exists() else []

    deadline = time.monotonic() + 240
    while not any(r["world"] == 2 for r in joined()):
        assert time.monotonic() < deadline, f"the two agents never formed a group: {joined()}"
        time.sleep(0.5)
    # The rendezvous really goes through the store Pod: both agents were told to meet there.
    worker = cluster.kubectl_json("get", "pod", "stretchy-worker-0", "-n", namespace)
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["PET_RDZV_ENDPOINT"].startswith("stretchy-rdzv:")
    store = cluster.kubectl_json("get", "pod", "stretchy-rdzv", "-n", namespace)
    assert store["status"]["phase"] == "Running" and store["spec"]["nodeName"] == cluster.nodes[0].name
    time.sleep(3)  # some steps at world size 2, saved
    cluster.kubectl("delete", "pod", "stretchy-worker-1", "-n", namespace, "--grace-period=0", "--force")
    job = wait_for_condition(cluster, namespace, "stretchy", {"Succeeded", "Failed"}, timeout=400)
    conditions = {c["type"]: c for c in job["status"]["conditions"]}
    assert "Failed" not in conditions, conditions["Failed"]["message"]
    # A membership change, not a failure (the attempts say why one ended, if one did).
    assert job["status"].get("restartCount", 0) == 0, job["status"]["attempts"]
    assert job["status"].get("membershipChanges", 0) >= 1
    assert json.loads((data / "result.json").read_text())["steps"] == 80
    later = [r for r in joined() if int(r["resumed_from"]) > 0]  # type: ignore[call-overload]
    assert later, f"no group re-formed from the checkpoint after the loss: {joined()}"
