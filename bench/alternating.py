"""Controllers measured beside each other on one real node: a cluster for the run, and the controllers taking
turns trial by trial, so that this VM's drifting speed hits each alike (``bench.real_node``,
``bench.trainer_v2``)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete

# (cluster, controller name, its folder) -> something with stop(); (cluster, controller name) -> None
Start = Callable[[Cluster, str, Path], Any]
Trial = Callable[[Cluster, str], None]


def alternate(
    prefix: str,
    prepare: Callable[[Cluster], None],
    controllers: tuple[str, ...],
    trials: int,
    start: Start,
    trial: Trial,
    last: tuple[str, Trial],
) -> None:
    """On a new one-node cluster, after ``prepare``: ``trials`` rounds of ``trial`` for each controller in turn,
    then one round of ``last`` (its label, its function); each controller started before and stopped after."""
    directory = Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
    name = f"bench-{os.getpid()}"
    cluster = create(ClusterConfig(name, (NodeConfig("kubelet"),)), directory / "rig")
    try:
        prepare(cluster)
        for round_number in range(trials + 1):
            final = round_number == trials
            for controller in controllers:
                print(f"  {controller}, {last[0] if final else f'trial {round_number + 1}'} ...", flush=True)
                started = start(cluster, controller, directory / f"{controller}-{round_number}")
                try:
                    (last[1] if final else trial)(cluster, controller)
                finally:
                    started.stop()
    finally:
        delete(name, directory / "rig")
