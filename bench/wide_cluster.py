"""One PyTorchJob of 1,024 replicas on 64 simulated (kwok) nodes, against the same Pods as one Indexed Job.

As in ``bench.operator``: torchjob's operator runs in the cluster as users deploy it (two replicas, leader election)
on the one real node, then cordoned, and the job's Pods go to 64 kwok nodes, which run nothing. The anchor is the
same job rendered as an Indexed Job (``torchjob render --to indexed-job``: 1,024 completions and a headless Service),
run by Kubernetes' own Job controller. The sides take turns, trial by trial, the first alternating, each in a new
namespace, deleted and gone before the next. Measured: seconds from ``kubectl apply`` until every Pod is Running; the
API requests the operator made per replica (its own count, by verb); the leading operator process's peak RSS. Then
the same job under its replicas' progress reports, one replica frozen in each trial (``bench/report_load.py``), and
one of the 64 nodes vanished in each (``bench/wide_node_loss.py``).
``python -m bench --only wide``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench import cluster_kit, report_load, wide_node_loss
from bench.operator import as_indexed_jobs, job
from bench.records import Run

NODES, REPLICAS = 64, 1024


def record(run: Run, trials: int) -> None:
    name = f"bench-wide-{os.getpid()}"
    directory = Path(tempfile.mkdtemp(prefix="bench-wide-"))
    with cluster_kit.simulated_nodes(name, directory, NODES) as cluster:
        anchor = ("indexed job", as_indexed_jobs([job("wide-idx", REPLICAS)]))
        cluster_kit.take_turns(run, cluster, trials, [job("wide", REPLICAS)], anchor, REPLICAS, ("replica", REPLICAS))
        report_load.record(run, cluster, trials, job("wide", REPLICAS), REPLICAS)
        wide_node_loss.record(run, cluster, trials, job("wide", REPLICAS), REPLICAS)
