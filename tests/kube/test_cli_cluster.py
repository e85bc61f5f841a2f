"""``torchjob submit`` and ``get/list/logs/delete --cluster`` against the operator on the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import yaml
from kubeflow.training import TrainingClient

from kuberig import Cluster, append_log_lines
from tests.support.cli import run_cli_on_cluster
from tests.support.cluster_jobs import all_pods, get_job, job_manifest, pods, running_pods
from tests.support.operator import OperatorProcess
from tests.support.waits import wait_until
from torchjob.testing import make_job

ROOT = Path(__file__).resolve().parents[2]


def test_submit_follow_streams_every_replica_and_exits_with_the_jobs_outcome(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_manifest("follow", workers=1)))
    logs = {name: tmp_path / f"{name}.log" for name in ("follow-master-0", "follow-worker-0")}
    # Logs exist before the pods do, so the follower meets them as soon as the pods run.
    for name, file in logs.items():
        cluster.serve_logs(namespace, name, "pytorch", [f"{name} starting"], file, wait=False)

    def finish() -> None:
        wait_until(lambda: len(running_pods(cluster, namespace, "follow")) == 2, what="two running pods")
        time.sleep(2)  # let the follower attach
        append_log_lines(logs["follow-master-0"], ["master done"])
        time.sleep(1)
        cluster.end_pod(namespace, "follow-master-0", 0)

    helper = threading.Thread(target=finish)
    helper.start()
    result = run_cli_on_cluster(cluster, "submit", str(path), "-n", namespace, "--follow")
    helper.join()
    assert result.returncode == 0, result.stderr
    assert "[master-0] follow-master-0 starting" in result.stdout
    assert "[worker-0] follow-worker-0 starting" in result.stdout
    assert "[master-0] master done" in result.stdout
    assert "follow Succeeded" in result.stderr


def test_get_list_logs_delete_with_cluster(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_manifest("cli", workers=1)))
    submitted = run_cli_on_cluster(cluster, "submit", str(path), "-n", namespace)
    assert submitted.returncode == 0, submitted.stderr
    assert f"pytorchjob.kubeflow.org/cli created in namespace {namespace}" in submitted.stderr
    wait_until(lambda: len(running_pods(cluster, namespace, "cli")) == 2, what="two running pods")
    cluster.serve_logs(namespace, "cli-worker-0", "pytorch", ["step 1", "step 2"], tmp_path / "w.log")

    listed = run_cli_on_cluster(cluster, "list", "--cluster", "-n", namespace)
    row = listed.stdout.splitlines()[1].split() if listed.returncode == 0 else []
    assert row[:3] == ["cli", "Running", "-"] and row[-2:] == ["0", "-"], listed.stdout  # no repairs, no spares
    got = run_cli_on_cluster(cluster, "get", "--cluster", "-n", namespace, "cli")
    assert "State:     Running" in got.stdout and "Worker:    1 active" in got.stdout, got.stdout
    logs = subprocess.run(
        [sys.executable, "-m", "torchjob.cli.main", "logs", "cli", "-n", namespace, "--replica", "worker-0"],
        env={**cluster.env(), "TORCHJOB_TARGET": "cluster"},  # the setting instead of the flag
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert logs.stdout.splitlines() == ["step 1", "step 2"], logs.stderr

    again = run_cli_on_cluster(cluster, "submit", str(path), "-n", namespace)
    assert again.returncode == 3 and "already exists" in again.stderr
    deleted = run_cli_on_cluster(cluster, "delete", "--cluster", "-n", namespace, "cli")
    assert deleted.returncode == 0
    wait_until(lambda: not pods(cluster, namespace, "cli"), what="the job's pods to be garbage-collected")
    missing = run_cli_on_cluster(cluster, "get", "--cluster", "-n", namespace, "cli")
    assert missing.returncode == 3 and "not found" in missing.stderr


def test_submit_reports_the_api_servers_own_refusal(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    result = run_cli_on_cluster(
        cluster, "submit", str(ROOT / "examples" / "mnist" / "job.yaml"), "-n", "no-such-namespace"
    )
    assert result.returncode == 3
    assert 'namespaces "no-such-namespace" not found' in result.stderr
    assert "Traceback" not in result.stderr


def test_submit_rejects_a_bad_file_before_reaching_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    manifest = job_manifest("bad", workers=1)
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    path.write_text(yaml.safe_dump(manifest))
    result = run_cli_on_cluster(cluster, "submit", str(path))
    assert result.returncode == 2
    assert result.stderr.startswith(f"torchjob: {path}: spec.pytorchReplicaSpecs.Worker.replicas")
    assert os.linesep.join(result.stderr.splitlines()[1:]) == ""


def test_scale_cluster_grows_and_shrinks_an_elastic_job_without_a_restart(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    manifest = (
        make_job("stretch")
        .workers(2)
        .elastic(minReplicas=1, maxReplicas=3)
        .annotate(**{"torchjob.io/replacement-delay-seconds": "2"})
        .wire()
    )
    cluster.apply(manifest, namespace)
    wait_until(lambda: len(running_pods(cluster, namespace, "stretch")) == 2, what="2 running workers")
    env = {
        e["name"]: e.get("value")
        for e in pods(cluster, namespace, "stretch")["stretch-worker-1"]["spec"]["containers"][0]["env"]
    }
    # The agents meet at torchjob's rendezvous store, a Pod of its own, so that any Worker can be lost.
    assert (env["PET_NNODES"], env["PET_RDZV_ENDPOINT"]) == ("1:3", "stretch-rdzv:29400")
    assert (env["PET_RDZV_CONF"], env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"]) == ("is_host=false", "1")
    store = all_pods(cluster, namespace, "stretch")["stretch-rdzv"]
    assert "stretch-rdzv" not in pods(cluster, namespace, "stretch")  # not one of the job's Pods to Kubeflow's tools
    # Kubeflow's SDK on the running elastic job: its Pods are the Workers, and their logs come back.
    sdk = TrainingClient(config_file=str(cluster.kubeconfig), namespace=namespace)
    assert sorted(sdk.get_job_pod_names("stretch", is_master=False)) == ["stretch-worker-0", "stretch-worker-1"]
    for worker in ("stretch-worker-0", "stretch-worker-1"):
        cluster.serve_logs(namespace, worker, "pytorch", [f"{worker} step 1"], tmp_path / worker)
    logs, _ = sdk.get_job_logs("stretch", is_master=False)
    assert logs == {w: f"{w} step 1\n" for w in ("stretch-worker-0", "stretch-worker-1")}
    assert store["spec"]["containers"][0]["command"][:2] == ["python", "-c"]
    assert store["spec"]["containers"][0]["image"] == "example/train:1"
    assert cluster.kubectl_json("get", "-n", namespace, "service", "stretch-rdzv")["spec"]["clusterIP"] == "None"

    refused = run_cli_on_cluster(cluster, "scale", "stretch", "--workers", "4", "--cluster", "-n", namespace)
    assert refused.returncode == 3 and "bounds [1, 3], got 4" in refused.stderr
    grown = run_cli_on_cluster(cluster, "scale", "stretch", "--workers", "3", "--cluster", "-n", namespace)
    assert grown.returncode == 0, grown.stderr
    wait_until(lambda: len(running_pods(cluster, namespace, "stretch")) == 3, what="a third worker")
    assert (
        run_cli_on_cluster(cluster, "scale", "stretch", "--workers", "1", "--cluster", "-n", namespace).returncode == 0
    )
    wait_until(
        lambda: sorted(all_pods(cluster, namespace, "stretch")) == ["stretch-rdzv", "stretch-worker-0"],
        what="one worker left",
    )

    # A lost member while at least minReplicas remain: the group carries on, and a replacement joins.
    assert (
        run_cli_on_cluster(cluster, "scale", "stretch", "--workers", "2", "--cluster", "-n", namespace).returncode == 0
    )
    wait_until(lambda: len(running_pods(cluster, namespace, "stretch")) == 2, what="two workers again")
    cluster.end_pod(namespace, "stretch-worker-1", 137)
    wait_until(
        lambda: get_job(cluster, namespace, "stretch")["status"].get("membershipChanges") == 6,
        what="the loss and the replacement counted as membership changes",
    )
    wait_until(lambda: len(running_pods(cluster, namespace, "stretch")) == 2, what="the replacement running")
    status = get_job(cluster, namespace, "stretch")["status"]
    assert (status["attempt"], status["restartCount"]) == (0, 0)
    assert status["conditions"][-1]["type"] == "Running"
    # When the job ends, its store goes with it, whatever the cleanPodPolicy.
    cluster.end_pod(namespace, "stretch-worker-0", 0)
    wait_until(lambda: "stretch-rdzv" not in all_pods(cluster, namespace, "stretch"), what="the store removed")
    assert get_job(cluster, namespace, "stretch")["status"]["conditions"][-1]["type"] == "Succeeded"


def test_the_dashboard_shows_a_clusters_jobs_and_their_pods_logs(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    """`torchjob ui --cluster`: the same pages and API over the cluster's PyTorchJobs (HTTP, read-only)."""
    cluster.serve_logs(
        namespace, "seen-master-0", "pytorch", ["hello from the master"], tmp_path / "master.log", wait=False
    )
    cluster.apply(job_manifest("seen", workers=1), namespace)
    wait_until(lambda: len(running_pods(cluster, namespace, "seen")) == 2, what="two running pods")
    argv = [sys.executable, "-m", "torchjob.cli.main", "ui", "--cluster", "-n", namespace, "--port", "0"]
    env = {**cluster.env(), "TORCHJOB_HOME": "/nonexistent"}
    served = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert served.stderr is not None
        url = served.stderr.readline().split("dashboard at ")[1].strip().rstrip("/")
        with urllib.request.urlopen(url + "/api/jobs", timeout=30) as answer:
            rows = json.loads(answer.read())
        assert [(r["name"], r["state"]) for r in rows] == [("seen", "Running")]
        with urllib.request.urlopen(url + "/jobs/seen", timeout=30) as answer:
            page = answer.read().decode()
        assert 'data-replica="master-0"' in page and 'data-replica="worker-0"' in page
        logs = url + "/api/jobs/seen/logs?replica=master-0&offset=0"
        with urllib.request.urlopen(logs, timeout=30) as answer:
            assert "hello from the master" in json.loads(answer.read())["text"]
    finally:
        served.terminate()
        served.wait(timeout=10)
