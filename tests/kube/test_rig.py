"""The test control plane itself: pods on fake nodes, the exit-code hook, CRDs, logs, Jobs, RBAC."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from kuberig import Cluster, append_log_lines
from kuberig.toolchain import control_plane_bin
from tests.support.waits import wait_until


def pod(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **metadata},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "pytorch", "image": "example/train:1"}]},
    }


def phase(cluster: Cluster, namespace: str, name: str) -> str:
    return str(cluster.kubectl_json("get", "-n", namespace, "pod", name).get("status", {}).get("phase", ""))


def test_a_pod_runs_on_a_fake_node_and_fails_with_the_exit_code_we_choose(cluster: Cluster, namespace: str) -> None:
    cluster.apply(pod("trainer"), namespace)
    wait_until(lambda: phase(cluster, namespace, "trainer") == "Running", what="the pod to run")
    node = cluster.kubectl_json("get", "-n", namespace, "pod", "trainer")["spec"]["nodeName"]
    assert node.startswith("kwok-node-")  # placed by the real scheduler

    cluster.end_pod(namespace, "trainer", 137, reason="OOMKilled")
    wait_until(lambda: phase(cluster, namespace, "trainer") == "Failed", what="the pod to fail")
    status = cluster.kubectl_json("get", "-n", namespace, "pod", "trainer")["status"]
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled")


def test_exit_code_zero_succeeds(cluster: Cluster, namespace: str) -> None:
    cluster.apply(pod("done"), namespace)
    wait_until(lambda: phase(cluster, namespace, "done") == "Running", what="the pod to run")
    cluster.end_pod(namespace, "done", 0)
    wait_until(lambda: phase(cluster, namespace, "done") == "Succeeded", what="the pod to succeed")


def test_a_crd_and_a_custom_object(cluster: Cluster, namespace: str) -> None:
    cluster.apply(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.rig.torchjob.io"},
            "spec": {
                "group": "rig.torchjob.io",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
                            }
                        },
                    }
                ],
            },
        }
    )
    cluster.kubectl("wait", "--for=condition=Established", "crd/widgets.rig.torchjob.io", "--timeout=60s")
    cluster.apply(
        {"apiVersion": "rig.torchjob.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}},
        namespace,
    )
    assert cluster.kubectl_json("get", "-n", namespace, "widget", "w")["spec"] == {"size": 3}
    # kubectl validates strictly, and the API server prunes unknown fields when asked not to validate.
    extra = (
        '{"apiVersion": "rig.torchjob.io/v1", "kind": "Widget", "metadata": {"name": "w2"},'
        ' "spec": {"size": 1, "colour": "red"}}'
    )
    strict = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=extra, check=False)
    assert strict.returncode != 0 and 'unknown field "spec.colour"' in strict.stderr
    cluster.kubectl("apply", "--validate=false", "-n", namespace, "-f", "-", input=extra)
    assert cluster.kubectl_json("get", "-n", namespace, "widget", "w2")["spec"] == {"size": 1}


def test_pod_logs_through_the_api_including_follow(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    cluster.apply(pod("talker"), namespace)
    wait_until(lambda: phase(cluster, namespace, "talker") == "Running", what="the pod to run")
    log_file = tmp_path / "talker.log"
    cluster.serve_logs(namespace, "talker", "pytorch", ["Rank 0: epoch 1/2", "Rank 0: epoch 2/2"], log_file)
    logs = wait_until(
        lambda: cluster.kubectl("logs", "-n", namespace, "talker", check=False).stdout, what="logs to be served"
    )
    assert logs.splitlines() == ["Rank 0: epoch 1/2", "Rank 0: epoch 2/2"]

    follower = subprocess.Popen(
        [str(control_plane_bin() / "kubectl"), "logs", "-f", "-n", namespace, "talker"],
        stdout=subprocess.PIPE,
        text=True,
        env=cluster.env(),
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline().strip() == "Rank 0: epoch 1/2"
        assert follower.stdout.readline().strip() == "Rank 0: epoch 2/2"
        append_log_lines(log_file, ["Rank 0: training completed."])
        assert follower.stdout.readline().strip() == "Rank 0: training completed."
    finally:
        follower.kill()
        follower.wait()


def test_an_indexed_job_gets_completion_indexes_from_the_job_controller(cluster: Cluster, namespace: str) -> None:
    cluster.apply(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "indexed"},
            "spec": {
                "completionMode": "Indexed",
                "completions": 3,
                "parallelism": 3,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "pytorch", "image": "example/train:1", "command": ["torchrun", "train.py"]}
                        ],
                    }
                },
            },
        },
        namespace,
    )

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = cluster.kubectl_json("get", "-n", namespace, "pods", "-l", "job-name=indexed")[
            "items"
        ]
        return items if len(items) == 3 else []

    found = wait_until(pods, what="3 pods of the Indexed Job")
    indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in found)
    assert indexes == ["0", "1", "2"]
    for p in found:
        env = {e["name"]: e for e in p["spec"]["containers"][0]["env"]}
        field = env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert field == "metadata.labels['batch.kubernetes.io/job-completion-index']"
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Complete", "job/indexed", "--timeout=90s")


def test_rbac_is_enforced(cluster: Cluster, namespace: str) -> None:
    who = f"--as=system:serviceaccount:{namespace}:default"
    assert cluster.kubectl("auth", "can-i", "list", "pods", "-n", namespace, who, check=False).stdout.strip() == "no"
    assert cluster.kubectl("auth", "can-i", "list", "pods", "-n", namespace).stdout.strip() == "yes"


def test_a_rendered_indexed_job_runs_on_the_cluster(cluster: Cluster, namespace: str) -> None:
    """`torchjob render --to indexed-job` output, applied as is: pods get their completion index."""
    import yaml

    from tests.support.paths import ROOT
    from torchjob.api.loading import load_job_file
    from torchjob.backends.kubernetes.indexed_job import render

    manifests, _ = render(load_job_file(ROOT / "examples" / "mnist" / "job.yaml"))
    for manifest in manifests:
        manifest["metadata"]["namespace"] = namespace
    cluster.apply(yaml.safe_dump_all(manifests), namespace)

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = cluster.kubectl_json("get", "-n", namespace, "pods", "-l", "job-name=mnist")[
            "items"
        ]
        return items if len(items) == 3 else []

    found = wait_until(pods, what="3 pods of the rendered Indexed Job")
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in found) == [
        "0",
        "1",
        "2",
    ]
    for p in found:
        assert p["spec"]["subdomain"] == "mnist"
        assert "--node-rank=$(JOB_COMPLETION_INDEX)" in p["spec"]["containers"][0]["args"]
    assert cluster.kubectl_json("get", "-n", namespace, "service", "mnist")["spec"]["clusterIP"] == "None"
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Complete", "job/mnist", "--timeout=90s")
