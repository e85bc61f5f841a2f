"""Real-size state: what a checkpoint of a sharded model costs the training it interrupts.

The GPT example's ~110M-parameter model (``examples/gpt``, size ``100m``: 1.3 GB of weights and AdamW's two
moments) sharded with FSDP2 over 4 ranks (one process each, gloo, this 2-core machine), saved with
``torchjob.train.sharded_checkpoint`` to a local folder: each trial a synchronous save (training blocked for
all of it: the anchor) and an asynchronous one (blocked only while the state is staged in memory; written and
committed in the background), each the slowest rank's time. Target: blocked ≤ 10% of the synchronous save.

Not yet here (#51): kill → first step of a sharded group in place, restores from peers' memory, and torchft on
the same model. ``python -m bench --only state``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.measure import BIN
from bench.records import Run

SCRIPT = Path(__file__).resolve().parent / "scripts" / "sharded_save.py"
SIZE, RANKS = "100m", 4


def record(run: Run, trials: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-state-"))
    try:
        argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(RANKS), str(SCRIPT), SIZE, str(trials)]
        env = {**os.environ, "BENCH_OUT": str(work), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"the sharded saves failed: {done.stderr[-2000:]}")
        saves = [json.loads(line) for line in (work / "saves.jsonl").read_text().splitlines() if line.strip()]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for case in ("sync", "async blocked", "async committed"):
        run.add(f"{case} save", [s[case] for s in saves])
    run.add("state size", [saves[0]["bytes"] / 1e9], "GB")
    print("  " + "; ".join(f"{k} {v}" for k, v in saves[-1].items()), flush=True)
