"""Launch latency: from invoking the launcher to the first completed collective on every rank, 3 ranks.

Three launchers on the same payload, interleaved so machine noise hits all: ``torchjob run`` (1 Master + 2
Workers), ``torchrun --standalone --nproc-per-node 3``, and a bare spawn of 3 processes with the env set by hand —
the floor, which is mostly ``import torch``. Two payloads: ``collective`` (scripts/first_collective.py: one
all_reduce, the issue's measure) and ``ddp`` (scripts/first_ddp_step.py: one step of a DDP model, whose
constructor imports torch._dynamo, as a DDP script's launch does; torchjob's warm interpreter imports it once
before it forks the ranks, so this is the launch a DDP job sees).

A third payload is the README's own job (examples/mnist/job.yaml) to every rank's first step, under ``torchjob run``
and under ``torchrun`` with the same script and arguments. ``python -m bench --only launch``.
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
from typing import Any

import yaml

from bench import mnist_runs
from bench.measure import BIN, start_launcher, stop_launcher
from bench.records import Run
from torchjob.testing import make_job

SCRIPTS = Path(__file__).resolve().parent / "scripts"
PAYLOADS = {"collective": SCRIPTS / "first_collective.py", "ddp": SCRIPTS / "first_ddp_step.py"}


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


def readme_job(launcher: str) -> float:
    """The README's job (examples/mnist/job.yaml, DDP over 3 ranks) → every rank's first completed step, under
    ``torchjob run`` or ``torchrun --standalone --nproc-per-node 3`` with the job's own arguments; stopped there."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-launch-readme-{launcher}-"))
    try:
        path, name = mnist_runs.job_file(work, "job.yaml")
        if launcher == "torchjob":
            output = work / "home" / "jobs" / name / "output"
            env = {**os.environ, "TORCHJOB_HOME": str(work / "home")}
            argv = [str(BIN / "torchjob"), "run", str(path)]
        else:
            output = work / "output"
            env = {**os.environ, "TORCHJOB_OUTPUT_DIR": str(output), "OMP_NUM_THREADS": "1"}
            argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "3", "train.py"]
            argv += [str(a) for a in mnist_runs.container_args(path)]
        started = time.time()
        process = start_launcher(argv, env, work)
        try:
            deadline = time.monotonic() + 180
            while (firsts := mnist_runs.first_steps(output, 3)) is None:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{launcher}: the README's job never completed a step on every rank")
                time.sleep(0.02)
            return max(firsts) - started
        finally:
            stop_launcher(process)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _or_none(trial: Callable[..., float], *args: Any) -> float | None:
    """A trial whose launcher failed counts as one that never got there (the table says how many), not as the
    end of the benchmark."""
    try:
        return trial(*args)
    except (subprocess.CalledProcessError, RuntimeError) as err:
        print(f"  a trial failed: {err}", flush=True)
        return None


def record(run: Run, trials: int) -> None:
    """Every payload under every launcher, interleaved: all three launchers within a trial, trial by trial."""
    samples: dict[str, list[float | None]] = {}
    for _ in range(trials):
        for payload, script in PAYLOADS.items():
            for name, launch in LAUNCHERS.items():
                work = Path(tempfile.mkdtemp(prefix=f"bench-launch-{name}-"))
                try:
                    samples.setdefault(f"{payload} {name}", []).append(_or_none(launch, work, script))
                finally:
                    shutil.rmtree(work, ignore_errors=True)
        for launcher in ("torchjob", "torchrun"):
            samples.setdefault(f"readme {launcher}", []).append(_or_none(readme_job, launcher))
        print("  " + ", ".join(f"{case} {values[-1]}" for case, values in samples.items()), flush=True)
    for case, values in samples.items():
        run.add(case, values)
