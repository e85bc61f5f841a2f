"""Launch latency: from invoking the launcher to the first completed collective on every rank, 3 ranks.

Three launchers on the same payload, interleaved so machine noise hits all: ``torchjob run`` (1 Master + 2
Workers), ``torchrun --standalone --nproc-per-node 3``, and a bare spawn of 3 processes with the env set by hand —
the floor, which is mostly ``import torch``. Two payloads: ``collective`` (scripts/first_collective.py: one
all_reduce, the issue's measure) and ``ddp`` (scripts/first_ddp_step.py: one step of a DDP model, whose
constructor imports torch._dynamo, as a DDP script's launch does; torchjob's warm interpreter imports it once
before it forks the ranks, so this is the launch a DDP job sees).

``python -m bench.launch [TRIALS]`` measures both and prints the medians.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.measure import median
from torchjob.testing import make_job

SCRIPTS = Path(__file__).resolve().parent / "scripts"
PAYLOADS = {"collective": SCRIPTS / "first_collective.py", "ddp": SCRIPTS / "first_ddp_step.py"}
BIN = Path(sys.executable).parent


def _job_file(directory: Path, out: Path, payload: Path) -> Path:
    job = make_job("launch").master().workers(2).command("python", str(payload)).env(BENCH_OUT=str(out))
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(job.wire()))
    return path


def _latency(out: Path, started: float) -> float:
    stamps = [float(p.read_text()) for p in out.glob("rank-*.txt")]
    if len(stamps) != 3:
        raise RuntimeError(f"expected 3 ranks to report, got {len(stamps)}")
    return max(stamps) - started


def run_torchjob(work: Path, payload: Path) -> float:
    out = work / "out"
    out.mkdir()
    job = _job_file(work, out, payload)
    env = {**os.environ, "TORCHJOB_HOME": str(work / "home")}
    started = time.time()
    subprocess.run([str(BIN / "torchjob"), "run", str(job)], env=env, check=True, capture_output=True)
    return _latency(out, started)


def run_torchrun(work: Path, payload: Path) -> float:
    out = work / "out"
    out.mkdir()
    env = {**os.environ, "BENCH_OUT": str(out)}
    started = time.time()
    subprocess.run(
        [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "3", str(payload)],
        env=env,
        check=True,
        capture_output=True,
    )
    return _latency(out, started)


def run_bare(work: Path, payload: Path) -> float:
    out = work / "out"
    out.mkdir()
    base = {
        **os.environ,
        "BENCH_OUT": str(out),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29533",
        "WORLD_SIZE": "3",
        "OMP_NUM_THREADS": "1",
    }
    started = time.time()
    procs = [subprocess.Popen([sys.executable, str(payload)], env={**base, "RANK": str(r)}) for r in range(3)]
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("bare spawn failed")
    return _latency(out, started)


LAUNCHERS: dict[str, Callable[[Path, Path], float]] = {
    "torchjob": run_torchjob,
    "torchrun": run_torchrun,
    "bare": run_bare,
}


def measure(trials: int = 5, payload: str = "collective") -> dict[str, float]:
    """Median seconds until every rank has run ``payload`` (a PAYLOADS key), per launcher."""
    results: dict[str, list[float]] = {name: [] for name in LAUNCHERS}
    for _ in range(trials):
        for name, launch in LAUNCHERS.items():  # interleaved
            work = Path(tempfile.mkdtemp(prefix=f"bench-launch-{name}-"))
            try:
                results[name].append(launch(work, PAYLOADS[payload]))
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return {name: median(values) for name, values in results.items()}


def main(argv: list[str]) -> None:
    trials = int(argv[0]) if argv else 3
    for payload in PAYLOADS:
        found = measure(trials, payload)
        ratio = found["torchjob"] / found["torchrun"]
        print(
            f"launch → {payload} on 3 ranks (median of {trials}): torchjob {found['torchjob']:.2f} s, "
            f"torchrun {found['torchrun']:.2f} s ({ratio:.2f}x), bare spawn {found['bare']:.2f} s",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
