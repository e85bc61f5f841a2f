"""The operator at scale: 100 PyTorchJobs × 3 replicas submitted at once, on simulated (kwok) nodes.

torchjob's operator runs in the cluster as users deploy it (two replicas, leader election) on the one real node,
which is then cordoned: the jobs' Pods go to three kwok nodes, which run nothing (a Pod is Running as soon as it is
bound). The anchor is the same 300 Pods as 100 rendered Indexed Jobs (``torchjob render --to indexed-job``), run by
Kubernetes' own Job controller. The two take turns, trial by trial, the first side alternating, each in a new
namespace, the last one deleted and gone first. Measured: seconds until every Pod is Running; the API requests the
operator made per job (its own count, by verb); the leading operator process's peak RSS (VmHWM).
``python -m bench --only scale``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from tests.support import operator_pods

from bench.cluster_kit import DeployedOperator
from bench.records import Run
from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete, toolchain
from torchjob.api.loading import job_from_mapping
from torchjob.backends.kubernetes.indexed_job import render
from torchjob.testing import make_job

JOBS, REPLICAS = 100, 3


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


def _gone(rig: Cluster, namespace: str) -> None:
    rig.kubectl("delete", "namespace", namespace, "--wait=true", timeout=600)


def _counters(rig: Cluster) -> dict[str, int]:
    """The leading operator's API requests so far, by verb (its /counters, read from inside its Pod)."""
    leading = operator_pods.leader(rig)
    program = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8080/counters').read().decode())"
    found = rig.kubectl("exec", "-n", "torchjob-system", leading, "--", "python3", "-c", program).stdout
    requests: dict[str, int] = json.loads(found)["requests"]
    return requests


def _peak_rss_mb(rig: Cluster) -> float:
    leading = operator_pods.leader(rig)
    peak = 0
    for pid in rig.container_pids("torchjob-system", leading, "operator"):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]))
    return peak / 1024


def record(run: Run, trials: int, jobs: int = JOBS) -> None:
    toolchain.build("build-kube.sh")
    name = f"bench-scale-{os.getpid()}"
    directory = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    rig = create(ClusterConfig(name, (NodeConfig("kubelet"), NodeConfig("kwok", 3))), directory / "rig")
    try:
        # The operator on the real node (the kwok nodes cordoned meanwhile: they run nothing), the jobs' Pods on
        # the kwok nodes (the real node cordoned after: the operator stays where it runs).
        kwoks = [node.name for node in rig.nodes if node.kind == "kwok"]
        real = next(node.name for node in rig.nodes if node.kind == "kubelet")
        for node in kwoks:
            rig.kubectl("cordon", node)
        DeployedOperator(rig, directory / "operator")
        for node in kwoks:
            rig.kubectl("uncordon", node)
        rig.kubectl("cordon", real)
        indexed: list[dict[str, Any]] = []
        for i in range(jobs):
            manifests, _ = render(job_from_mapping(job(f"idx-{i:03d}")))
            indexed += manifests
        for manifest in indexed:
            manifest["metadata"].pop("namespace", None)
        for number in range(trials):
            sides = ("torchjob", "indexed jobs") if number % 2 == 0 else ("indexed jobs", "torchjob")
            for side in sides:
                namespace = f"{side.split()[0]}-{number}"
                if side == "torchjob":
                    before = _counters(rig)
                    seconds = _time_until_running(rig, namespace, [job(f"job-{i:03d}") for i in range(jobs)])
                    time.sleep(3)  # the status writes that follow the last Pod starting
                    after = _counters(rig)
                    by_verb = {verb: after.get(verb, 0) - before.get(verb, 0) for verb in after}
                    run.keep("requests per job", sum(by_verb.values()) / jobs, "requests")
                    for verb, count in sorted(by_verb.items()):
                        run.keep(f"requests per job, {verb}", count / jobs, "requests")
                else:
                    seconds = _time_until_running(rig, namespace, indexed)
                run.keep(f"{side} all running", seconds)
                print(f"  trial {number + 1}, {side}: {seconds:.1f} s", flush=True)
                _gone(rig, namespace)
        run.keep("operator peak RSS", _peak_rss_mb(rig), "MB")
    finally:
        delete(name, directory / "rig")
