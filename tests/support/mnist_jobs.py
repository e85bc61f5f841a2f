"""The README's MNIST job (examples/mnist/job.yaml, as shipped) with its output on a PersistentVolumeClaim, as the
real-node tests and benches run it: model, checkpoints and metrics land on the claim ``data``."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.paths import MNIST


def mnist_on_a_claim(namespace: str, *extra_args: str, spread: bool = False) -> dict[str, Any]:
    """``spread``: its replicas prefer different nodes (preferred, so that a restart still fits on fewer)."""
    job: dict[str, Any] = yaml.safe_load((MNIST / "job.yaml").read_text())
    job["metadata"]["namespace"] = namespace
    labels = {"training.kubeflow.org/job-name": job["metadata"]["name"]}
    apart = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        container["args"] = [*container["args"], *extra_args]
        container["env"] = [{"name": "TORCHJOB_OUTPUT_DIR", "value": "/data"}]
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        pod["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        if spread:
            preferred = [{"weight": 100, "podAffinityTerm": apart}]
            pod["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    return job


def in_place_one_per_node(namespace: str, *extra_args: str) -> dict[str, Any]:
    """examples/mnist/job-inplace.yaml with one Worker: master, worker and the warm spare each on a node of their
    own (required anti-affinity; the rendezvous store Pod may share a node: it is none of them)."""
    job: dict[str, Any] = yaml.safe_load((MNIST / "job-inplace.yaml").read_text())
    return one_per_node(job, namespace, ["--epochs", "8", *extra_args])


def one_per_node(job: dict[str, Any], namespace: str, args: list[str]) -> dict[str, Any]:
    """An in-place example's ``job`` (one spare) with one Worker and the script's ``args``: master, worker and
    the warm spare each on a node of their own (the rendezvous store Pod may share a node: it is none of them)."""
    name = job["metadata"]["name"]
    job["metadata"]["namespace"] = namespace
    not_the_store = {"key": "torchjob.io/role", "operator": "NotIn", "values": ["rendezvous-store"]}
    mine = {"matchLabels": {"torchjob.io/job-name": name}, "matchExpressions": [not_the_store]}
    apart = {"labelSelector": mine, "topologyKey": "kubernetes.io/hostname"}
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        pod["containers"][0]["args"] = list(args)
        pod["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}}
    return job


def elastic_spread(namespace: str, epochs: int) -> dict[str, Any]:
    """examples/mnist/job-elastic-inplace.yaml (3 Workers, at least 2) with its Workers preferring a node each
    (preferred, so that the spare for a lost node's place still fits beside a survivor)."""
    job: dict[str, Any] = yaml.safe_load((MNIST / "job-elastic-inplace.yaml").read_text())
    name = job["metadata"]["name"]
    job["metadata"]["namespace"] = namespace
    not_the_store = {"key": "torchjob.io/role", "operator": "NotIn", "values": ["rendezvous-store"]}
    mine = {"matchLabels": {"torchjob.io/job-name": name}, "matchExpressions": [not_the_store]}
    apart = [{"weight": 100, "podAffinityTerm": {"labelSelector": mine, "topologyKey": "kubernetes.io/hostname"}}]
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["containers"][0]["args"] = ["--epochs", str(epochs)]
    pod["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": apart}}
    return job


def lost_and_survivor(job: str, where: dict[str, str]) -> tuple[str, str]:
    """For ``in_place_one_per_node``, given each Pod's node: the replica whose node to stop and the one that
    survives. The worker's, unless the rendezvous store shares its node (losing the store is another scenario)."""
    if where[f"{job}-worker-0"] == where.get(f"{job}-rdzv"):
        return "master-0", "worker-0"
    return "worker-0", "master-0"
