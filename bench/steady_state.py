"""Steady-state overhead: MNIST training throughput under torchjob vs torchrun, and what the controller costs.

The same script (examples/mnist/train.py) trains on 3 ranks under each launcher, interleaved; throughput is
rank 0's samples/s over its training loop (from metrics.json). The torchjob controller process is watched
for its own CPU time per second of wall time and its peak RSS while it supervises the 3 replicas.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

from bench.measure import BIN, watch
from bench.records import Run
from torchjob.testing import make_job

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mnist"
ARGS = ["--epochs", "4", "--batch-size", "32", "--log-interval", "1000"]


def _torchjob(work: Path) -> tuple[float, float, float]:
    job = make_job("steady").master().workers(2).command("python", "train.py", *ARGS).wire()
    # The job file sits beside train.py, as a user's would.
    path = EXAMPLE / f".bench-{os.getpid()}.yaml"
    path.write_text(yaml.safe_dump(job))
    try:
        usage = watch([str(BIN / "torchjob"), "run", str(path)], env={**os.environ, "TORCHJOB_HOME": str(work)})
    finally:
        path.unlink()
    if usage.returncode != 0:
        raise RuntimeError("torchjob run of the MNIST example failed")
    metrics = json.loads((work / "jobs" / "steady" / "output" / "metrics.json").read_text())
    return metrics["samples_per_second_rank0"], usage.cpu_per_second, usage.peak_rss_mb


def _torchrun(work: Path) -> float:
    env = {**os.environ, "TORCHJOB_OUTPUT_DIR": str(work)}
    subprocess.run(
        [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "3", "train.py", *ARGS],
        cwd=EXAMPLE,
        env=env,
        check=True,
        capture_output=True,
    )
    return float(json.loads((work / "metrics.json").read_text())["samples_per_second_rank0"])


def record(run: Run, trials: int) -> None:
    samples: dict[str, list[float | None]] = {}
    for trial in range(trials):
        # Alternate which launcher goes first, so a warm-up or order effect does not favour either.
        order = ("torchjob", "torchrun") if trial % 2 == 0 else ("torchrun", "torchjob")
        for launcher in order:
            work = Path(tempfile.mkdtemp(prefix=f"bench-steady-{launcher}-"))
            try:
                if launcher == "torchjob":
                    sps, cpu_rate, peak = _torchjob(work)
                    found = {"torchjob samples": sps, "controller cpu": cpu_rate, "controller rss": peak}
                else:
                    found = {"torchrun samples": _torchrun(work)}
            finally:
                shutil.rmtree(work, ignore_errors=True)
            for case, value in found.items():
                samples.setdefault(case, []).append(value)
    units = {"controller cpu": "CPU s/s", "controller rss": "MB"}
    for case, values in samples.items():
        run.add(case, values, units.get(case, "samples/s"))
