"""The operator at scale: 100 PyTorchJobs × 3 replicas submitted at once on the kwok rig.

Measured: seconds until every Pod is Running, API requests the operator made per job (its own count, by
verb), and the operator's peak RSS (VmHWM). The anchor is the same 300 Pods as 100 rendered Indexed Jobs
(``torchjob render --to indexed-job``), which Kubernetes' own Job controller runs: the same rig, the same run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete, toolchain
from torchjob.api.loading import job_from_mapping
from torchjob.backends.kubernetes.indexed_job import render
from torchjob.testing import make_job

ROOT = Path(__file__).resolve().parents[1]
JOBS, REPLICAS = 100, 3


@dataclass(frozen=True)
class OperatorResult:
    operator_seconds: float
    indexed_job_seconds: float
    requests_per_job: float
    requests_by_verb: dict[str, int]
    peak_rss_mb: float


def job(name: str) -> dict[str, Any]:
    return make_job(name).master().workers(REPLICAS - 1).restart_policy("OnFailure").wire()


def _running(rig: Cluster, namespace: str) -> int:
    pods = rig.kubectl_json("get", "pods", "-n", namespace)["items"]
    # kwok completes Job-owned Pods as soon as they run: Succeeded counts as having got there.
    return sum(1 for p in pods if p.get("status", {}).get("phase") in ("Running", "Succeeded"))


def _time_until_running(rig: Cluster, namespace: str, manifests: list[dict[str, Any]]) -> float:
    rig.kubectl("create", "namespace", namespace)
    while rig.kubectl("get", "-n", namespace, "serviceaccount", "default", check=False).returncode != 0:
        time.sleep(0.2)
    text = yaml.safe_dump_all(manifests)
    started = time.monotonic()
    rig.kubectl("apply", "-n", namespace, "-f", "-", input=text, timeout=300)
    wanted = len([m for m in manifests if m["kind"] in ("PyTorchJob", "Job")]) * REPLICAS
    while (running := _running(rig, namespace)) < wanted:
        if time.monotonic() - started > 600:
            raise RuntimeError(f"{running} of {wanted} pods in {namespace} were Running after 600 s")
        time.sleep(0.5)
    return time.monotonic() - started


def measure(jobs: int = JOBS) -> OperatorResult:
    toolchain.build("build-kube.sh")
    name = f"bench-operator-{os.getpid()}"
    rig = create(ClusterConfig(name, (NodeConfig("kwok", 3),)), Path(tempfile.mkdtemp(prefix="bench-operator-")))
    operator: subprocess.Popen[bytes] | None = None
    try:
        rig.kubectl("apply", "-f", str(ROOT / "deploy" / "crd.yaml"))
        rig.kubectl("wait", "--for=condition=Established", "crd/pytorchjobs.kubeflow.org", "--timeout=60s")
        port = 18000 + (int(time.time()) % 1000)
        operator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torchjob.cli.main",
                "operator",
                f"--kubeconfig={rig.kubeconfig}",
                f"--health-port={port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(Path(rig.directory) / "operator.log", "wb"),  # noqa: SIM115 - lives as long as the operator
        )
        metrics_url = f"http://127.0.0.1:{port}/counters"
        while True:
            try:
                before = json.loads(urllib.request.urlopen(metrics_url, timeout=2).read())["requests"]
                break
            except OSError:
                time.sleep(0.2)
        operator_seconds = _time_until_running(rig, "bench-operator", [job(f"job-{i:03d}") for i in range(jobs)])
        time.sleep(3)  # the status writes that follow the last Pod starting
        after = json.loads(urllib.request.urlopen(metrics_url, timeout=2).read())["requests"]
        by_verb = {verb: after.get(verb, 0) - before.get(verb, 0) for verb in after}
        status = Path(f"/proc/{operator.pid}/status").read_text()
        peak_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))

        indexed = []
        for i in range(jobs):
            manifests, _ = render(job_from_mapping(job(f"idx-{i:03d}")))
            indexed += manifests
        for manifest in indexed:
            manifest["metadata"].pop("namespace", None)
        indexed_seconds = _time_until_running(rig, "bench-indexed", indexed)
        return OperatorResult(
            operator_seconds=operator_seconds,
            indexed_job_seconds=indexed_seconds,
            requests_per_job=sum(by_verb.values()) / jobs,
            requests_by_verb=by_verb,
            peak_rss_mb=peak_kb / 1024,
        )
    finally:
        if operator is not None:
            operator.terminate()
            operator.wait(timeout=30)
        delete(name, rig.directory)


if __name__ == "__main__":
    print(measure(int(sys.argv[1]) if len(sys.argv) > 1 else JOBS))
