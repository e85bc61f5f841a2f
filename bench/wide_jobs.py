"""100 PyTorchJobs of 32 replicas submitted at once on 64 simulated (kwok) nodes, against 100 Indexed Jobs.

The cluster of ``bench.wide`` (torchjob's operator deployed in it as users deploy it, two replicas, leader election,
on the one real node, then cordoned), and the comparison of ``bench.scale`` at the width users run: 3,200 Pods in
100 jobs at once. The anchor is the same Pods as 100 rendered Indexed Jobs with their headless Services, run by
Kubernetes' own Job controller. The sides take turns, the first alternating, each trial in a new namespace deleted
before the next. Measured: seconds from ``kubectl apply`` until every Pod is Running; the operator's API requests
per replica (its own count, by verb); the leading operator process's peak RSS. ``python -m bench --only wide-jobs``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench import cluster_kit
from bench.operator import as_indexed_jobs, job
from bench.records import Run

NODES, JOBS, REPLICAS = 64, 100, 32


def record(run: Run, trials: int) -> None:
    name = f"bench-wide-jobs-{os.getpid()}"
    directory = Path(tempfile.mkdtemp(prefix="bench-wide-jobs-"))
    pods = JOBS * REPLICAS
    with cluster_kit.simulated_nodes(name, directory, NODES) as cluster:
        mine = [job(f"job-{i:03d}", REPLICAS) for i in range(JOBS)]
        anchor = ("indexed jobs", as_indexed_jobs([job(f"idx-{i:03d}", REPLICAS) for i in range(JOBS)]))
        cluster_kit.take_turns(run, cluster, trials, mine, anchor, pods, ("replica", pods))
