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

import os
import tempfile
from pathlib import Path
from typing import Any

from bench import cluster_kit
from bench.records import Run
from torchjob.api.loading import job_from_mapping
from torchjob.backends.kubernetes.indexed_job import render
from torchjob.testing import make_job

JOBS, REPLICAS = 100, 3


def job(name: str, replicas: int = REPLICAS) -> dict[str, Any]:
    return make_job(name).master().workers(replicas - 1).restart_policy("OnFailure").wire()


def as_indexed_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each job rendered as an Indexed Job and its headless Service, for the namespace they are applied in."""
    manifests: list[dict[str, Any]] = []
    for wire in jobs:
        rendered, _ = render(job_from_mapping(wire))
        manifests += rendered
    for manifest in manifests:
        manifest["metadata"].pop("namespace", None)
    return manifests


def record(run: Run, trials: int, jobs: int = JOBS) -> None:
    name = f"bench-scale-{os.getpid()}"
    directory = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    with cluster_kit.simulated_nodes(name, directory, 3) as rig:
        indexed = as_indexed_jobs([job(f"idx-{i:03d}") for i in range(jobs)])
        mine = [job(f"job-{i:03d}") for i in range(jobs)]
        cluster_kit.take_turns(run, rig, trials, mine, ("indexed jobs", indexed), jobs * REPLICAS, ("job", jobs))
