"""Every benchmark, by name: its tier, the module that measures it, its trials, and the anchors it runs beside
torchjob (as torchx registers its schedulers). ``python -m bench`` iterates this; a module is imported only when
its benchmark runs, so listing or reporting needs neither torch nor a cluster.

A benchmark module has ``record(run: bench.records.Run, trials: int) -> None``: it measures, interleaving torchjob
with its anchors trial by trial, and adds every case (every sample) to ``run``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from bench.records import Run, package_version, rig_versions

LOCAL, CLUSTER = "local", "cluster"


class Recording(Protocol):
    def __call__(self, run: Run, trials: int) -> None: ...


@dataclass(frozen=True)
class Benchmark:
    name: str
    tier: str  # LOCAL: processes on this machine; CLUSTER: the test cluster's builds and nodes
    module: str  # bench.<module>.record measures it
    trials: int  # in a full run; 5 where a headline figure is under a second
    quick: int | None  # trials under --quick (the headline rows); None: not measured then
    anchors: tuple[str, ...]  # what it is measured beside, for the records' versions
    minutes: int  # about how long a full run takes on the 2-core VM
    about: str

    def recorder(self) -> Recording:
        found: Recording = importlib.import_module(f"bench.{self.module}").record
        return found


BENCHMARKS = (
    Benchmark(
        "launch", LOCAL, "launch", 5, 5, ("torchrun",), 3, "launch → first collective, first DDP step, README job"
    ),
    Benchmark(
        "kill",
        LOCAL,
        "kill",
        5,
        5,
        ("torchrun",),
        10,
        "a SIGKILLed rank: in place, warm and cold group restarts, torchrun; time added to the README job",
    ),
    Benchmark(
        "width",
        LOCAL,
        "width",
        3,
        None,
        ("torchrun", "torchft"),
        75,
        "3, 8, 16 and 32 ranks: a SIGKILLed rank (in place, warm restart, torchrun, torchft), a frozen one, launch, "
        "memory",
    ),
    Benchmark(
        "repair-width",
        LOCAL,
        "repair_width",
        3,
        None,
        (),
        12,
        "in place at 3, 8, 16 and 32 ranks: where a repair's time goes, beside the width's usual step",
    ),
    Benchmark("hang", LOCAL, "in_place_hang", 3, None, (), 2, "a SIGSTOPped rank: in place against a group restart"),
    Benchmark("hangs", LOCAL, "hangs", 3, None, (), 14, "hang detection with no tuning, and no false alarm under load"),
    Benchmark("elastic", LOCAL, "elastic", 5, None, ("torchrun",), 14, "an elastic member lost: in place, torchrun"),
    Benchmark("steady", LOCAL, "steady_state", 4, None, ("torchrun",), 2, "training throughput, controller cost"),
    Benchmark("checkpoint", LOCAL, "checkpoint", 16, None, (), 2, "sync and async checkpoints, 76 MB"),
    Benchmark(
        "state-1b",
        LOCAL,
        "state_large",
        3,
        None,
        ("torchrun",),
        35,
        "a sharded 0.97B-parameter model: what fits on 24 GB (a group restart from DCP against torchrun's, the "
        "steady step, a sync save, peak memory) and what does not, with its bytes",
    ),
    Benchmark(
        "state",
        LOCAL,
        "state",
        3,
        None,
        ("torchft", "torchrun"),
        20,
        "a sharded 110M-parameter model: its DCP checkpoint, sync against async; a rank SIGKILLed, in place against "
        "torchft, each layout's repair against its floor",
    ),
    Benchmark(
        "state-restart",
        LOCAL,
        "state_restart",
        3,
        None,
        ("torchrun",),
        8,
        "the sharded 110M-parameter model, a rank SIGKILLed: a warm group restart from DCP against torchrun's",
    ),
    Benchmark("cli", LOCAL, "cli", 7, None, (), 1, "`torchjob list`/`get`/`--help` with 1,000 jobs"),
    Benchmark("refusals", LOCAL, "refusals", 3, None, (), 3, "bad input refused"),
    Benchmark("dashboard", LOCAL, "ui", 5, None, ("chromium",), 2, "the dashboard with 1,000 jobs"),
    Benchmark(
        "scale",
        CLUSTER,
        "operator",
        3,
        None,
        ("kubernetes", "kwok"),
        4,
        "100 jobs × 3 replicas on simulated nodes, the operator in the cluster, against Indexed Jobs",
    ),
    Benchmark(
        "wide",
        CLUSTER,
        "wide_cluster",
        3,
        None,
        ("kubernetes", "kwok"),
        20,
        "one job of 1,024 replicas on 64 simulated nodes, the operator in the cluster, against an Indexed Job; its "
        "replicas' reports, one frozen",
    ),
    Benchmark(
        "wide-jobs",
        CLUSTER,
        "wide_jobs",
        3,
        None,
        ("kubernetes", "kwok"),
        15,
        "100 jobs × 32 replicas at once on 64 simulated nodes, the operator in the cluster, against Indexed Jobs",
    ),
    Benchmark(
        "real-node",
        CLUSTER,
        "real_node",
        3,
        None,
        ("kubernetes", "kubeflow-operator"),
        18,
        "one real node: apply → Running, a killed trainer, in place, eviction, against Kubeflow's operator",
    ),
    Benchmark(
        "node-loss",
        CLUSTER,
        "node_loss",
        3,
        None,
        ("kubernetes", "kubeflow-operator"),
        20,
        "a node of three vanishes: in place, group restarts, against Kubeflow's operator",
    ),
    Benchmark(
        "trainer-v2",
        CLUSTER,
        "trainer_v2",
        3,
        None,
        ("kubernetes", "kubeflow-trainer", "jobset"),
        20,
        "the same TrainJob under Kubeflow Trainer v2.2 and under torchjob",
    ),
)
BY_NAME = {benchmark.name: benchmark for benchmark in BENCHMARKS}


def anchor_versions(benchmark: Benchmark) -> dict[str, str]:
    rig = rig_versions()
    known: dict[str, Callable[[], str]] = {
        "torchrun": lambda: package_version("torch"),
        "chromium": lambda: "Debian's",
        "torchft": lambda: package_version("torchft"),
    }
    return {anchor: known[anchor]() if anchor in known else rig.get(anchor, "unknown") for anchor in benchmark.anchors}
