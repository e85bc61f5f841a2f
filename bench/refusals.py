"""How fast bad input is refused: ``torchjob validate`` on each of the invalid files in tests/data/invalid.

The anchor is ``torchjob validate`` of the valid MNIST job, run the same way: what answering at all costs
(starting Python, importing the models). The target is every refusal, the slowest included, within 1 s.
``python -m bench --only refusals``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.corpus import INVALID_CORPUS, corpus_case

from bench.measure import BIN
from bench.records import Run

ROOT = Path(__file__).resolve().parent.parent


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    return time.perf_counter() - started, done.returncode


def record(run: Run, trials: int) -> None:
    """Per trial, every invalid file once (each must exit 2) and the valid job once: the slowest refusal, the
    median one, and the valid job's answer (the anchor) are its samples; the slowest file is named."""
    env = {**os.environ, "TORCHJOB_HOME": tempfile.mkdtemp(prefix="bench-refusals-")}
    torchjob = str(BIN / "torchjob")
    files = sorted(INVALID_CORPUS.glob("*.yaml"))
    slowest: list[float | None] = []
    middle: list[float | None] = []
    valid: list[float | None] = []
    named: list[str] = []
    for _ in range(trials):
        took: dict[str, float] = {}
        for path in files:
            seconds, code = _timed([torchjob, "validate", str(path), *corpus_case(path)[1]], env)
            if code != 2:
                raise RuntimeError(f"{path.name}: exit {code}, expected 2")
            took[path.name] = seconds
        valid.append(_timed([torchjob, "validate", str(ROOT / "examples" / "mnist" / "job.yaml")], env)[0])
        worst = max(took, key=lambda name: took[name])
        slowest.append(took[worst])
        middle.append(statistics.median(took.values()))
        named.append(worst)
    run.add("slowest refusal", slowest)
    run.add("median refusal", middle)
    run.add("valid job", valid)
    run.describe("files", str(len(files)))
    run.describe("slowest file", max(set(named), key=named.count))
