"""How fast bad input is refused: ``torchjob validate`` on each of the invalid files in tests/data/invalid.

The anchor is ``torchjob validate`` of the valid MNIST job, run the same way: what answering at all costs
(starting Python, importing the models). The target is every refusal, the slowest included, within 1 s.
``python -m bench.refusals`` prints this row alone.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.corpus import INVALID_CORPUS, corpus_case

from bench.launch import BIN
from bench.measure import median

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Refusals:
    files: int
    slowest_seconds: float
    slowest_file: str
    median_seconds: float
    valid_median_seconds: float


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    return time.perf_counter() - started, done.returncode


def measure(trials: int = 3) -> Refusals:
    env = {**os.environ, "TORCHJOB_HOME": tempfile.mkdtemp(prefix="bench-refusals-")}
    torchjob = str(BIN / "torchjob")
    worst: dict[str, float] = {}
    for path in sorted(INVALID_CORPUS.glob("*.yaml")):
        samples = []
        for _ in range(trials):
            seconds, code = _timed([torchjob, "validate", str(path), *corpus_case(path)[1]], env)
            if code != 2:
                raise RuntimeError(f"{path.name}: exit {code}, expected 2")
            samples.append(seconds)
        worst[path.name] = median(samples)
    valid = [_timed([torchjob, "validate", str(ROOT / "examples" / "mnist" / "job.yaml")], env)[0] for _ in range(5)]
    slowest = max(worst, key=lambda name: worst[name])
    return Refusals(len(worst), worst[slowest], slowest, median(list(worst.values())), median(valid))


def row(result: Refusals) -> tuple[str, str, str, float, str, bool]:
    return (
        f"bad input: slowest of {result.files} invalid files refused (median of 3, s)",
        f"{result.slowest_seconds:.2f} ({result.slowest_file}); median file {result.median_seconds:.2f}",
        f"validating the valid MNIST job {result.valid_median_seconds:.2f}",
        result.slowest_seconds / result.valid_median_seconds,
        "< 1 s",
        result.slowest_seconds < 1.0,
    )


if __name__ == "__main__":
    metric, value, anchor, ratio, target, met = row(measure())
    print(f"| {metric} | {value} | {anchor} | {ratio:.2f} | {target} | {'yes' if met else '**no**'} |")
