"""Recovery time: from the SIGKILL of one rank to the first completed training step of the next attempt.

The same 2-rank DDP script under ``torchjob run`` (group restart, OnFailure) and under
``torchrun --standalone --nproc-per-node 2 --max-restarts 3`` (torchelastic's in-place restart). A trial that
has not recovered within the timeout is reported as such.

The floor is what any restart pays: a fresh process that imports torch and builds a DDP model. It is larger
than ``import torch`` alone, because DDP's constructor imports ``torch._dynamo`` (about 4.5 s here on top of
3.3 s). The target is recovery within 3 s of that floor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench.launch import BIN
from bench.measure import median, recovery_trials
from torchjob.testing import make_job

PAYLOAD = Path(__file__).resolve().parent / "scripts" / "recovery_train.py"
TIMEOUT = 60.0


def wait_for_files(path_glob: str, directory: Path, count: int, timeout: float) -> list[Path] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(directory.glob(path_glob))
        if len(found) >= count:
            return found
        time.sleep(0.01)
    return None


def _trial(launcher: str, work: Path) -> float | None:
    out = work / "out"
    out.mkdir()
    env = {**os.environ, "BENCH_OUT": str(out), "TORCHJOB_HOME": str(work / "home"), "OMP_NUM_THREADS": "1"}
    if launcher == "torchjob":
        job = (
            make_job("recovery")
            .master()
            .workers(1)
            .command("python", str(PAYLOAD))
            .env(BENCH_OUT=str(out))
            .restart_policy("OnFailure")
            .annotate(**{"torchjob.io/termination-grace-seconds": "2"})
            .wire()
        )
        (work / "job.yaml").write_text(yaml.safe_dump(job))
        argv = [str(BIN / "torchjob"), "run", str(work / "job.yaml")]
    else:
        argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "--max-restarts", "3", str(PAYLOAD)]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if wait_for_files("first-step-0-rank*.txt", out, 2, TIMEOUT) is None:
            raise RuntimeError(f"{launcher}: the first attempt never trained")
        time.sleep(0.5)
        victim = int((out / "pid-0-rank1.txt").read_text())
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
        found = wait_for_files("first-step-1-rank*.txt", out, 2, TIMEOUT)
        if found is None:
            return None  # did not recover
        return max(float(p.read_text()) for p in found) - killed_at
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def cold_ddp_start_seconds(trials: int = 3) -> float:
    """A fresh process: import torch, join a 1-rank gloo group, build a DDP model — what a restart costs."""
    code = (
        "import os, torch, torch.distributed as dist; from torch import nn; "
        "from torch.nn.parallel import DistributedDataParallel as DDP; "
        "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:0', rank=0, world_size=1); DDP(nn.Linear(2, 1))"
    )
    samples = []
    for _ in range(trials):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        samples.append(time.perf_counter() - started)
    return median(samples)


def measure(trials: int = 3) -> dict[str, tuple[float | None, int]]:
    """Launcher → (median recovery seconds over the trials that recovered, how many did not recover)."""
    return recovery_trials(_trial, ("torchjob", "torchrun"), trials, "bench-recovery")
