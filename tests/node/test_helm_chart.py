"""torchjob's Helm chart (deploy/chart), with the real `helm` (built from its Go module), on a cluster of its own
with a real node: installed with the operator's image, it serves jobs; upgraded, it rolls out; uninstalled, it
leaves the CRDs and the jobs in them, as Kubeflow Trainer's chart does. Its RBAC is deploy/'s, unchanged."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete
from kuberig.images.load import NODE_PYTHON
from tests.support.incluster import IMAGE_NAME, push_operator_image
from tests.support.operator_pods import leader, operator_pods, report_endpoints
from tests.support.paths import DEPLOY
from tests.support.servers import build, helm_binary
from tests.support.waits import wait_until

CHART = DEPLOY / "chart"
NAMESPACE = "torchjob-system"


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    failed = build("helm-build.sh")
    if failed:
        pytest.fail(f"cannot build helm:\n{failed}", pytrace=False)
    directory = tmp_path_factory.mktemp("helm") / "cluster"
    name = f"helm-{secrets.token_hex(3)}"
    cluster = create(ClusterConfig(name, (NodeConfig("kubelet"),)), directory)
    try:
        yield cluster
    finally:
        delete(name, directory)


def helm(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "HELM_CACHE_HOME": str(cluster.directory / "helm")}
    env["HELM_CONFIG_HOME"] = env["HELM_DATA_HOME"] = env["HELM_CACHE_HOME"]
    done = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, env=env, timeout=400)
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr[-3000:]}"
    return done


def _rules(documents: list[dict[str, Any]]) -> list[Any]:
    return next(d for d in documents if d and d["kind"] == "ClusterRole")["rules"]


def test_the_chart_installs_serves_a_job_upgrades_and_uninstalls_leaving_the_crds(
    own_cluster: Cluster, tmp_path: Path
) -> None:
    cluster = own_cluster
    _, digest, _ = push_operator_image(cluster)
    image = ["--set", f"image.repository={IMAGE_NAME}", "--set", f"image.digest={digest}"]
    # What the chart renders is deploy/'s least privilege, unchanged.
    rendered = list(yaml.safe_load_all(helm(cluster, "template", "torchjob", str(CHART), "-n", NAMESPACE).stdout))
    assert _rules(rendered) == _rules(list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text())))

    helm(cluster, "install", "torchjob", str(CHART), "-n", NAMESPACE, "--create-namespace", *image, "--wait")
    crds = {c["metadata"]["name"] for c in cluster.kubectl_json("get", "crds")["items"]}
    assert {"pytorchjobs.kubeflow.org", "trainjobs.trainer.kubeflow.org", "elasticjobs.elastic.pytorch.org"} <= crds
    assert len(operator_pods(cluster)) == 2
    wait_until(lambda: leader(cluster) and report_endpoints(cluster) == [leader(cluster)], 120, "a serving leader")

    # It serves a job: a one-replica PyTorchJob of an image with nothing but python3, through to Succeeded.
    cluster.push_image("docker.io/me/hello:1", {**NODE_PYTHON})
    container = {"name": "pytorch", "image": "docker.io/me/hello:1", "command": ["python3", "-c", "print('hello')"]}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "hello", "namespace": "default"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [container]}}}}},
    }
    cluster.apply(job)

    def state() -> str:
        conditions = cluster.kubectl_json("get", "pytorchjob", "hello").get("status", {}).get("conditions") or []
        return str(conditions[-1]["type"]) if conditions else ""

    wait_until(lambda: state() == "Succeeded", 180, "the job to succeed under the chart's operator")

    upgraded = helm(
        cluster, "upgrade", "torchjob", str(CHART), "-n", NAMESPACE, "--reuse-values", "--set", "replicas=1"
    )
    assert "REVISION: 2" in upgraded.stdout
    wait_until(lambda: len(operator_pods(cluster)) == 1, 180, "the upgrade to one replica")
    deployment = cluster.kubectl_json("get", "deployment", "torchjob-operator", "-n", NAMESPACE)
    assert (
        deployment["spec"]["replicas"] == 1
        and "--leader-elect" not in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )

    helm(cluster, "uninstall", "torchjob", "-n", NAMESPACE, "--wait")
    assert cluster.kubectl("get", "deployment", "torchjob-operator", "-n", NAMESPACE, check=False).returncode != 0
    assert cluster.kubectl("get", "clusterrole", "torchjob-operator", check=False).returncode != 0
    # The CRDs stay (Helm never deletes a chart's crds/), and with them the jobs users made.
    crds = {c["metadata"]["name"] for c in cluster.kubectl_json("get", "crds")["items"]}
    assert "pytorchjobs.kubeflow.org" in crds and "elasticjobs.elastic.pytorch.org" in crds
    assert state() == "Succeeded"
