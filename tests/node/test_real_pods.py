"""PyTorchJobs on a real kubelet under the torchjob operator: Pods run real torch.distributed training,
and what the kubelet reports (exit codes, OOMKilled) reaches the job's status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kuberig import Cluster
from tests.support.cluster_waits import wait_for_condition, wait_for_pod_phase
from tests.support.images import KUBEFLOW_MNIST, TEST_SCRIPTS
from tests.support.operator import OperatorProcess
from tests.support.paths import DATA
from torchjob.backends.kubernetes import log_archive


def _pod(cluster: Cluster, namespace: str, name: str) -> dict:  # type: ignore[type-arg]
    return json.loads(cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json").stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("manifest", "namespace", "name"),
    [
        # Kubeflow's classic simple.yaml: its own namespace, imagePullPolicy Always, the command in the job.
        ("kubeflow-mnist.yaml", "kubeflow", "pytorch-simple"),
        # Kubeflow's dist-mnist over gloo: only arguments in the job, the image's entrypoint runs the script.
        ("kubeflow-dist-mnist-gloo.yaml", "default", "pytorch-dist-mnist-gloo"),
    ],
)
def test_kubeflow_examples_train_unchanged(
    cluster: Cluster, node_operator: OperatorProcess, manifest: str, namespace: str, name: str
) -> None:
    """Applied with kubectl as they are: both Pods pull the image, find each other through the headless
    Service and train together over gloo."""
    cluster.namespace(namespace)
    cluster.kubectl("apply", "-f", str(DATA / "valid" / manifest))
    job = wait_for_condition(cluster, namespace, name, {"Succeeded", "Failed"}, timeout=300)
    states = {c["type"]: c for c in job["status"]["conditions"]}
    assert "Failed" not in states, states["Failed"]["message"]
    for pod_name, rank in ((f"{name}-master-0", 0), (f"{name}-worker-0", 1)):
        pod = _pod(cluster, namespace, pod_name)
        assert pod["spec"]["nodeName"] == cluster.nodes[0].name
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        log = cluster.kubectl("logs", "-n", namespace, pod_name).stdout
        assert f"Rank {rank}: world size 2" in log, log
        assert f"Rank {rank}: epoch 1/1, average epoch loss=" in log, log
        assert f"Rank {rank}: training completed." in log, log
    master_log = cluster.kubectl("logs", "-n", namespace, f"{name}-master-0").stdout
    accuracy = float(master_log.split("test accuracy=")[1].split()[0])
    assert accuracy > 0.5  # one epoch on 4,000 digits; the point is that both ranks trained together
    cluster.kubectl("delete", "pytorchjob", name, "-n", namespace)


def test_a_container_over_its_memory_limit_fails_the_job_as_oomkilled(
    cluster: Cluster, node_operator: OperatorProcess
) -> None:
    namespace = cluster.namespace("oom")
    container = {
        "name": "pytorch",
        "image": KUBEFLOW_MNIST,
        "command": ["python3", "-c", "block = bytearray(512 * 1024 * 1024); print(len(block))"],
        "resources": {"limits": {"memory": "64Mi"}},
    }
    cluster.apply(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "greedy", "namespace": namespace},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Worker": {
                        "replicas": 1,
                        "restartPolicy": "Never",
                        "template": {"spec": {"containers": [container]}},
                    }
                }
            },
        }
    )
    job = wait_for_condition(cluster, namespace, "greedy", {"Failed"}, timeout=180)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert "OOMKilled" in failed["message"], failed
    terminated = _pod(cluster, namespace, "greedy-worker-0")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)


def test_a_script_that_fails_in_a_warm_pod_is_named_with_its_last_lines_and_its_output_kept(
    cluster: Cluster, node_operator: OperatorProcess
) -> None:
    """With ``torchjob.io/warm-start: "true"`` the container outlives its script: no termination message. The
    Failed reason of the attempt still quotes the script's last lines (read from the Pod's log), the next attempt
    starts in the same Pod, and the ended attempt's output is kept in its log archive."""
    namespace = cluster.namespace("warm-fails")
    container = {
        "name": "pytorch",
        "image": TEST_SCRIPTS,
        "command": ["python3", "launcher_probe.py"],
        "env": [{"name": "PROBE_DO", "value": json.dumps({"0": "raise", "1": "exit"})}],
    }
    template = {"spec": {"containers": [container], "terminationGracePeriodSeconds": 2}}
    cluster.apply(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "probe", "namespace": namespace, "annotations": {"torchjob.io/warm-start": "true"}},
            "spec": {
                "pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template}}
            },
        }
    )
    job = wait_for_condition(cluster, namespace, "probe", {"Succeeded", "Failed"}, timeout=240)
    states = {c["type"]: c for c in job["status"]["conditions"]}
    assert "Failed" not in states, states["Failed"]["message"]
    assert job["status"]["restartCount"] == 1
    outcome = job["status"]["attempts"][0]["outcome"]
    assert "RuntimeError: the probe failed in attempt 0" in outcome, outcome
    pod = _pod(cluster, namespace, "probe-master-0")
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0  # one container ran both attempts
    log = cluster.kubectl("logs", "-n", namespace, "probe-master-0").stdout
    assert "torchjob: attempt 1 starts in this Pod, warm" in log, log
    kept = log_archive.read(cluster.kubectl_json("get", "configmap", "probe-logs-0", "-n", namespace))
    assert '"attempt": "0"' in kept["master-0"] and "RuntimeError" in kept["master-0"], kept
    assert '"attempt": "1"' not in kept["master-0"], kept


def test_rendered_indexed_job_trains_with_torchrun_in_pods(cluster: Cluster) -> None:
    """The operator-less path: `torchjob render --to indexed-job | kubectl apply -f -`; every Pod runs torchrun,
    which starts the script as one rank of the group (no torchjob operator involved)."""
    namespace = cluster.namespace("indexed")
    wire = (
        (DATA / "valid" / "kubeflow-mnist.yaml").read_text().replace("namespace: kubeflow", f"namespace: {namespace}")
    )
    rendered = subprocess.run(
        [sys.executable, "-m", "torchjob.cli.main", "render", "-", "--to", "indexed-job"],
        input=wire,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cluster.kubectl("apply", "-f", "-", input=rendered)
    cluster.kubectl(
        "wait", "-n", namespace, "--for=condition=Complete", "job/pytorch-simple", "--timeout=300s", timeout=320
    )
    logs = {}
    for index in (0, 1):
        selector = f"batch.kubernetes.io/job-completion-index={index}"
        logs[index] = cluster.kubectl("logs", "-n", namespace, "-l", selector, "--tail=-1").stdout
    assert "Rank 0: training completed." in logs[0], logs[0]
    assert "Rank 1: training completed." in logs[1], logs[1]
    assert "Rank 0: test accuracy=" in logs[0]


def test_an_image_loaded_as_a_newcomer_loads_it_imports_torch_and_runs_its_entrypoint_with_a_jobs_args(
    cluster: Cluster, tmp_path: Path
) -> None:
    """`kube-rig load image` as the cluster guide shows it: a folder with a script that imports torch, pushed under
    any name, runs with `kubectl run` (the node's Python environment is on the image's path). An image whose
    entrypoint is given runs it with the args a job gives, as the seeds' TorchElastic jobs rely on."""
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "t.py").write_text(
        "import os, sys, torch\nprint('torch', torch.__version__, os.environ['TEAM'], *sys.argv[1:])\n"
    )
    namespace = cluster.namespace("load-image")
    kube_rig = [str(Path(sys.executable).parent / "kube-rig"), "load", "image"]
    where = ["--dir", str(cluster.directory)]
    plain = subprocess.run(
        [*kube_rig, "docker.io/me/t:1", str(folder), *where, "--env", "TEAM=ml", "--cmd", "python3", "t.py"],
        capture_output=True,
        text=True,
    )
    assert plain.returncode == 0, plain.stderr
    cluster.kubectl("run", "t", "-n", namespace, "--image=docker.io/me/t:1", "--restart=Never")
    wait_for_pod_phase(cluster, namespace, "t", "Succeeded", timeout=120)
    assert cluster.kubectl("logs", "t", "-n", namespace).stdout.startswith("torch 2.")
    launcher = subprocess.run(
        [*kube_rig, "docker.io/me/launcher:1", str(folder), *where, "--env", "TEAM=ml", "--entrypoint", "python3 t.py"],
        capture_output=True,
        text=True,
    )
    assert launcher.returncode == 0, launcher.stderr
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "args-only"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "docker.io/me/launcher:1", "args": ["--epochs=1", "data"]}],
        },
    }
    cluster.apply(pod, namespace)
    wait_for_pod_phase(cluster, namespace, "args-only", "Succeeded", timeout=120)
    assert cluster.kubectl("logs", "args-only", "-n", namespace).stdout.split()[2:] == ["ml", "--epochs=1", "data"]
    refused = subprocess.run(
        [*kube_rig, "docker.io/me/t:2", str(folder), *where, "--env", "2BAD"], capture_output=True, text=True
    )
    assert refused.returncode != 0 and "--env: expected KEY=VALUE" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
