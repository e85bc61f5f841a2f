"""torchft 0.2.0, the anchor that keeps survivors alive, run as its users run it here: a Lighthouse and ``groups``
replica groups of one process each (``scripts/torchft_replica.py``: the MNIST example's model, its per-gradient DDP
wrapper, a per-group batch that keeps the global batch), one group SIGKILLed once every group commits steps together,
and restarted at once, as the supervisor torchft needs (torchrun, Kubernetes) would.

Measured from the kill: replica 0's first step committed in a quorum formed without the killed group (the survivors
going on without it, as torchjob's survivors are timed: to the first step of a group the killed rank is not in), and
the replacement's first committed step (a cold start, then a heal from a live peer's state), and the moment its heal
loaded that state (it holds the lost state again). The step the survivors
had in flight often commits after the kill too, in the old quorum: the killed group had sent its gradients before
it died. That commit is kept as well (``next_commit``), but it is not the survivors going on without it. The
Lighthouse runs with its defaults (``heartbeat_timeout_ms`` 5 s, ``quorum_tick_ms`` 100) and a join time-out of 1 s
unless told (torchft's own launch examples use 10 s): a smaller quorum forms once that time-out has passed, or once
the killed group's heartbeat is 5 s old.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.measure import jsonl

SCRIPT = Path(__file__).resolve().parent / "scripts" / "torchft_replica.py"
VICTIM = 2  # the replica killed, as rank 2 is in the torchjob runs
STEPS = 100_000  # more than any trial reaches: the trial stops the groups
TIMEOUT = 300.0  # every group committing together, from the launch
AFTER_KILL = 60.0  # the replacement's first commit, from the kill
ALL_TOGETHER = 20  # steps every group commits in a full quorum before the kill


@dataclass
class Outcome:
    survivors_next: float | None = None  # replica 0's first step committed in a quorum formed after the kill
    next_commit: float | None = None  # replica 0's first commit after the kill, in whichever quorum (often the old)
    replacement_first: float | None = None  # the restarted group's first committed step, seconds after the kill
    replacement_healed: float | None = None  # the restarted group holding the lost state (loaded from a live peer)
    launch: float | None = None  # launch → every group's first committed step
    steady_step: float | None = None  # median seconds between replica 0's commits in a full quorum, before the kill


def _first_after(records: list[dict[str, Any]], moment: float) -> float | None:
    later = [float(r["time"]) for r in records if float(r["time"]) > moment]
    return later[0] - moment if later else None


def first_in_new_quorum(records: list[dict[str, Any]], moment: float, groups: int) -> float | None:
    """Seconds from ``moment`` to the first commit in a quorum other than the one of the last commit before it: the
    first step taken without a group killed at ``moment``. Records without a quorum number (another torchft) fall
    back to the first commit in a quorum smaller than ``groups``."""
    before = [r for r in records if float(r["time"]) <= moment]
    was = before[-1].get("quorum") if before else None
    for record in records:
        if float(record["time"]) <= moment:
            continue
        new = record.get("quorum") != was if was is not None else int(record["participants"]) < groups
        if new:
            return float(record["time"]) - moment
    return None


def trial(
    groups: int,
    global_batch: int,
    model: str = "mnist",
    length: int = 0,
    after_kill: float = AFTER_KILL,
    together: int = ALL_TOGETHER,
    timeout: float = TIMEOUT,
    join_timeout_ms: int = 1000,
) -> Outcome:
    """One run: ``groups`` replica groups training ``model`` (``scripts/torchft_replica.py``'s ``MODEL``, with
    sequences of ``length`` tokens for a language model: 0, its context), group
    ``VICTIM`` SIGKILLed once all have committed ``together`` steps in a full quorum (within ``timeout`` of the
    launch), restarted at once; stopped once the replacement has committed (or ``after_kill`` seconds have
    passed). ``join_timeout_ms``: how long the Lighthouse waits for every known group before it forms a smaller
    quorum."""
    os.environ.setdefault("RUST_LOG", "error")  # the Lighthouse logs every quorum request otherwise
    from torchft.coordination import LighthouseServer

    work = Path(tempfile.mkdtemp(prefix="bench-torchft-"))
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=join_timeout_ms)
    env = {
        **os.environ,
        "TORCHFT_LIGHTHOUSE": lighthouse.address(),
        "BENCH_OUT": str(work),
        "BATCH": str(max(1, global_batch // groups)),
        "STEPS": str(STEPS),
        "MODEL": model,
        "LENGTH": str(length),
        "OMP_NUM_THREADS": "1",
    }

    def start(replica: int) -> subprocess.Popen[bytes]:
        log = (work / f"replica-{replica}.log").open("ab")
        argv = [sys.executable, str(SCRIPT)]
        return subprocess.Popen(argv, env={**env, "REPLICA": str(replica)}, stdout=log, stderr=subprocess.STDOUT)

    outcome = Outcome()
    launched = time.time()
    processes = [start(replica) for replica in range(groups)]
    try:
        if not _wait_together(work, groups, processes, launched + timeout, together):
            return outcome
        firsts = [jsonl(work / f"replica-{replica}.jsonl")[0]["time"] for replica in range(groups)]
        outcome.launch = max(float(first) for first in firsts) - launched
        full = [float(r["time"]) for r in jsonl(work / "replica-0.jsonl") if r["participants"] == groups]
        outcome.steady_step = statistics.median(b - a for a, b in itertools.pairwise(full))
        processes[VICTIM].send_signal(signal.SIGKILL)
        killed_at = time.time()
        processes[VICTIM].wait()
        processes[VICTIM] = start(VICTIM)
        deadline = killed_at + after_kill
        while time.time() < deadline and outcome.replacement_first is None:
            time.sleep(0.05)
            outcome.replacement_first = _first_after(jsonl(work / f"replica-{VICTIM}.jsonl"), killed_at)
        outcome.replacement_healed = _first_after(jsonl(work / f"healed-{VICTIM}.jsonl"), killed_at)
        survivor = jsonl(work / "replica-0.jsonl")
        outcome.next_commit = _first_after(survivor, killed_at)
        outcome.survivors_next = first_in_new_quorum(survivor, killed_at, groups)
        return outcome
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait()
        lighthouse.shutdown()
        shutil.rmtree(work, ignore_errors=True)


def _wait_together(
    work: Path, groups: int, processes: list[subprocess.Popen[bytes]], deadline: float, together: int
) -> bool:
    """Whether every group has committed ``together`` steps in a quorum of all ``groups`` before ``deadline``."""
    while time.time() < deadline:
        if any(process.poll() is not None for process in processes):
            return False
        full = [
            sum(1 for r in jsonl(work / f"replica-{replica}.jsonl") if r["participants"] == groups)
            for replica in range(groups)
        ]
        if min(full) >= together:
            return True
        time.sleep(0.2)
    return False
