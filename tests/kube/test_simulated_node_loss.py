"""A simulated node that vanishes as a host does: its replica is lost with it, found by the operator's own probe.

kwok nodes have addresses of their own on this machine (kuberig's ``network/addresses.py``): a connection there is
answered while the node is up, and unanswered once it vanished. Its Lease goes on being renewed (kwok renews it), and
the job's liveness deadline is five minutes: only the operator's probe of the node, beside the replica's silence on
the report channel, can decide the loss within the test's wait. The wide version (one node of 64 under 1,024
replicas) is ``bench.wide``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kuberig import Cluster
from kuberig.node.kwok import KwokNode
from tests.support.cluster_jobs import get_job, pods
from tests.support.operator import OperatorProcess
from tests.support.servers import free_port
from tests.support.waits import wait_until
from torchjob import worker_files
from torchjob.api import extensions
from torchjob.backends.kubernetes.reachability import connect, kubelet_address
from torchjob.reporting import call_operator
from torchjob.testing import make_job

MANAGER = "torchjob.io/node-loss-test"


def _job() -> dict[str, Any]:
    job = make_job("spot").master().workers(1).restart_policy("ExitCode").run_policy(managedBy=MANAGER)
    job.annotate(**{extensions.LIVENESS_DEADLINE: "300"})
    wire = job.wire()
    # A replica a node: the one that vanishes takes only its own.
    apart = {"labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": "spot"}}}
    for spec in wire["spec"]["pytorchReplicaSpecs"].values():
        required = [{**apart, "topologyKey": "kubernetes.io/hostname"}]
        spec["template"]["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    return wire


def _token(cluster: Cluster, namespace: str, pod: dict[str, Any], folder: Path) -> Path:
    meta = pod["metadata"]
    binding = ["--bound-object-kind=Pod", f"--bound-object-name={meta['name']}", f"--bound-object-uid={meta['uid']}"]
    token = cluster.kubectl(
        "create", "token", "default", "-n", namespace, f"--audience={worker_files.REPORT_AUDIENCE}", *binding
    )
    path = folder / meta["name"]
    path.write_text(token.stdout.strip())
    return path


def test_a_simulated_node_that_vanishes_takes_its_replica_with_it(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    port = free_port()
    deciding = OperatorProcess(
        operator.kubeconfig,
        tmp_path / "operator.log",
        ("--namespace", namespace, f"--managed-by={MANAGER}", f"--report-address=127.0.0.1:{port}"),
    )
    deciding.start()
    stop = threading.Event()
    vanished: str | None = None
    try:
        cluster.apply(_job(), namespace)
        running = wait_until(lambda: _running(cluster, namespace), what="both replicas Running, a node each")
        env = running["spot-master-0"]["spec"]["containers"][0]["env"]
        url = next(e["value"] for e in env if e["name"] == worker_files.ENV_REPORT_URL)
        secret = cluster.kubectl_json("get", "secret", "torchjob-report-tls", "-n", "torchjob-system")
        ca = base64.b64decode(secret["data"]["ca.crt"]).decode()
        tokens = {name: _token(cluster, namespace, pod, tmp_path) for name, pod in running.items()}
        silent: set[str] = set()
        with pytest.MonkeyPatch.context() as env_of_the_pods:
            env_of_the_pods.setenv(worker_files.ENV_REPORT_CA, ca)
            reporting = threading.Thread(target=_report, args=(url, tokens, silent, stop), daemon=True)
            reporting.start()
            wait_until(lambda: _heard(cluster, namespace), what="the replicas' reports heard")
            node_name = running["spot-worker-0"]["spec"]["nodeName"]
            node = cluster.node(node_name)
            assert isinstance(node, KwokNode)
            # The Node says the address of its own (kwok keeps it), where its "kubelet" answers: the host is up.
            address = kubelet_address(cluster.kubectl_json("get", "node", node_name))
            assert address is not None and address[0] == node.ip, address
            assert connect(address, 0.25) is True
            cluster.vanish(node_name)
            vanished = node_name
            silent.add("spot-worker-0")
            assert connect(address, 0.25) is False  # nothing answers, nobody is told
            status = wait_until(
                lambda: _says(cluster, namespace, "worker-0 was lost with its node"),
                timeout=60,
                what="worker-0 lost with its node (the Lease, renewed all along, would never say so)",
            )
            assert "master-0 was lost" not in status
            cluster.mend(node_name)
            vanished = None
            assert connect(address, 0.25) is True
    finally:
        stop.set()
        if vanished is not None:
            cluster.mend(vanished)
        deciding.stop()


def _running(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    found = pods(cluster, namespace, "spot")
    up = {n: p for n, p in found.items() if p["status"].get("phase") == "Running"}
    return up if len(up) == 2 else None


def _heard(cluster: Cluster, namespace: str) -> bool:
    status = get_job(cluster, namespace, "spot").get("status") or {}
    return (status.get("trainerStatus") or {}).get("progressPercentage") is not None


def _says(cluster: Cluster, namespace: str, words: str) -> str | None:
    status = json.dumps(get_job(cluster, namespace, "spot").get("status") or {})
    return status if words in status else None


def _report(url: str, tokens: dict[str, Path], silent: set[str], stop: threading.Event) -> None:
    """Each replica's report every half second, as a trainer's heartbeat (``train/metrics.py``) sends it, but for
    the replicas in ``silent``: one step, then they all wait (in a collective, for the one that vanished)."""
    step = 0
    while not stop.is_set():
        for name, token in tokens.items():
            if name in silent:
                continue
            now = time.time()
            report = {
                worker_files.REPORT_STEP: step,
                worker_files.REPORT_TIME: now,
                worker_files.REPORT_ALIVE: now,
                worker_files.REPORT_TOTAL_STEPS: 100,
                worker_files.REPORT_PROCESS: f"{name}-0",
            }
            with contextlib.suppress(OSError):  # best effort, as the trainers' own reports
                call_operator(url, token, report)
        step = min(step + 1, 5) if not silent else step
        time.sleep(0.5)
