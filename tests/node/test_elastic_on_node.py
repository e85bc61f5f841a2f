"""An elastic job on a real node: torchrun agents in Pods meet at torchjob's rendezvous store Pod, lose a
member, and carry on without a restart. TorchElastic's ElasticJob as its users write it (the example and its etcd,
applied with kubectl): the launchers, the images' entrypoint, meet at the etcd in the cluster, lose a Pod, and
carry on."""

from __future__ import annotations

import json
import time
from typing import Any

import yaml

from kuberig import Cluster
from tests.support.cluster_waits import wait_for_condition, wait_for_pod_phase
from tests.support.images import TEST_SCRIPTS
from tests.support.operator import OperatorProcess
from tests.support.paths import MNIST
from tests.support.waits import wait_until


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

    wait_until(lambda: any(r["world"] == 2 for r in joined()), 240, "the two agents' group", every=0.5, detail=joined)
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


def test_the_elasticjob_example_meets_at_its_etcd_in_the_cluster_loses_a_pod_and_carries_on(
    cluster: Cluster, node_operator: OperatorProcess
) -> None:
    namespace = cluster.namespace("elasticjob")
    cluster.kubectl("apply", "-n", namespace, "-f", str(MNIST / "etcd.yaml"))
    wait_for_pod_phase(cluster, namespace, "etcd", "Running", timeout=120)
    # The checkpoints on storage every Worker reaches, as the seed's lab keeps them (Azure storage): a replaced
    # Worker resumes from the others' checkpoint (each Pod's own folder would hold different ones).
    data = cluster.claim(namespace, "data")
    job = yaml.safe_load((MNIST / "elasticjob.yaml").read_text())
    pod = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]
    pod["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    pod["containers"][0]["args"].append("--checkpoint-dir=/data/checkpoints")
    cluster.apply(job, namespace)

    def logs(pod: str) -> str:
        return str(cluster.kubectl("logs", "-n", namespace, pod, check=False).stdout)

    workers = [f"mnist-elastic-worker-{i}" for i in range(3)]
    wait_until(
        lambda: "world size 3" in "".join(map(logs, workers)) and all("batch: " in logs(pod) for pod in workers),
        300,
        "every Worker training in a group of 3",
        every=1,
        detail=lambda: {pod: logs(pod)[-800:] for pod in workers},
    )
    cluster.kubectl("delete", "pod", "mnist-elastic-worker-2", "-n", namespace, "--grace-period=0", "--force")
    try:
        job = wait_for_condition(cluster, namespace, "mnist-elastic", {"Succeeded", "Failed"}, timeout=400)
    except BaseException:
        print({pod: logs(pod)[-3000:] for pod in workers})
        raise
    conditions = {c["type"]: c for c in job["status"]["conditions"]}
    assert "Failed" not in conditions, conditions["Failed"]["message"]
    assert job["status"].get("restartCount", 0) == 0, job["status"]["attempts"]
    assert job["status"].get("membershipChanges", 0) >= 1
    elastic: dict[str, Any] = cluster.kubectl_json("get", "elasticjob", "mnist-elastic", "-n", namespace)
    assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in elastic["status"]["conditions"])
    trained = "".join(logs(pod) for pod in workers)
    assert float(trained.split("test accuracy=")[1].split()[0]) >= 0.9
    # The launchers met in the cluster's etcd, as TorchElastic's do: this job's rendezvous is recorded there.
    keys = cluster.kubectl(
        "exec",
        "-n",
        namespace,
        "etcd",
        "--",
        "python3",
        "-c",
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:2379/v2/keys/?recursive=true').read().decode())",
    ).stdout
    assert "mnist-elastic-0" in keys, keys[-2000:]
    assert list((data / "checkpoints").glob("ckpt-*.json"))
