"""Real-size state: what a checkpoint of a sharded model costs the training it interrupts.

The GPT example's ~110M-parameter model (``examples/gpt``, size ``100m``: 1.3 GB of weights and AdamW's two
moments) sharded with FSDP2 over 4 ranks (one process each, gloo, this 2-core machine), saved with
``torchjob.train.sharded_checkpoint`` to a local folder: each trial a synchronous save (training blocked for
all of it: the anchor) and an asynchronous one (blocked only while the state is staged in memory; written and
committed in the background), each the slowest rank's time. Target: blocked ≤ 10% of the synchronous save.

Then a rank of the same model SIGKILLed, repaired in place from its HSDP replica's memory, under plain FSDP from
the copy its neighbour keeps, and unsharded under DDP from every survivor at once, beside torchft 0.2.0 on the same
model (``bench/state_repair.py``), trial by trial. Each also reads the largest rank's peak memory, beside the plain
example's (no copies, no spare), whose steady step it reads too; and plain FSDP in place with each block's gathered
weights kept through the backward is run without a kill, for its steady step and peak (the trade of memory for one
all-gather a step).

The ~1B case is a benchmark of its own (``bench/state_large.py``, ``python -m bench --only state-1b``): it
needs most of this machine's memory for over half an hour, and nothing here depends on it.
``python -m bench --only state``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench import state_repair, torchft_runs
from bench.measure import BIN
from bench.records import Run

SCRIPT = Path(__file__).resolve().parent / "scripts" / "sharded_save.py"
FLOOR = Path(__file__).resolve().parent / "scripts" / "send_floor.py"
SIZE, RANKS = "100m", 4
# Plain FSDP in place with each block's gathered weights kept through the backward (one all-gather a step).
KEPT_GATHERED = ("--reshard-after-forward", "no")


def record(run: Run, trials: int) -> None:
    saves = _payload(SCRIPT, RANKS, [SIZE, str(trials)], "saves.jsonl", "the sharded saves", timeout=1800)
    for case in ("sync", "async blocked", "async committed"):
        run.add(f"{case} save", [s[case] for s in saves])
    run.add("state size", [saves[0]["bytes"] / 1e9], "GB")
    print("  " + "; ".join(f"{k} {v}" for k, v in saves[-1].items()), flush=True)
    _floors(run, trials)
    _kills(run, trials)


def _floors(run: Run, trials: int) -> None:
    """The floor under each layout's repair: its lost state sent here in one message, rank to rank, over gloo."""
    lost = {
        "lost shard floor": state_repair.shard_bytes(),
        "fsdp lost shard floor": state_repair.shard_bytes(replicas=1),
        "ddp lost state floor": state_repair.shard_bytes(replicas=state_repair.RANKS),
    }
    for case, size in lost.items():
        sent = _payload(FLOOR, 2, [str(size), str(trials)], "floor.jsonl", "the floor's send", timeout=600)
        run.add(case, [row["seconds"] for row in sent])
        print(f"  {case}: {[round(row['seconds'], 3) for row in sent]} for {size / 1e9:.2f} GB", flush=True)


def _payload(
    script: Path, ranks: int, args: list[str], records: str, what: str, timeout: float
) -> list[dict[str, Any]]:
    """Run ``script`` on ``ranks`` ranks under torchrun; the JSON lines it wrote to ``$BENCH_OUT/<records>``."""
    work = Path(tempfile.mkdtemp(prefix="bench-state-"))
    try:
        argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(ranks), str(script), *args]
        env = {**os.environ, "BENCH_OUT": str(work), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{what} failed: {done.stderr[-2000:]}")
        return [json.loads(line) for line in (work / records).read_text().splitlines() if line.strip()]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _kills(run: Run, trials: int) -> None:
    """A rank SIGKILLed: in place (HSDP, the shard from its replica; plain FSDP, from its neighbour's copy; DDP, the
    whole state from every survivor) and torchft, alternating trial by trial."""
    run.add("lost shard", [state_repair.shard_bytes() / 1e9], "GB")
    run.add("fsdp lost shard", [state_repair.shard_bytes(replicas=1) / 1e9], "GB")
    run.add("ddp lost state", [state_repair.shard_bytes(replicas=state_repair.RANKS) / 1e9], "GB")
    samples: dict[str, list[float | None]] = {}
    failures: list[str] = []
    global_batch = state_repair.RANKS * state_repair.BATCH
    for number in range(trials):
        ours = state_repair.in_place_trial()
        plain = state_repair.in_place_trial(replicas=1)
        whole = state_repair.in_place_trial(ddp=True)
        gathered = state_repair.in_place_trial(replicas=1, extra=KEPT_GATHERED, kill=False)
        bare = state_repair.plain_fsdp(plain.steps)
        theirs = torchft_runs.trial(
            state_repair.RANKS,
            global_batch,
            model=f"gpt-{SIZE}",
            length=state_repair.LENGTH,
            after_kill=300.0,
            together=5,
            timeout=900.0,
            # At its 1 s, the 4 groups of this model on 2 cores never formed a quorum of all 4 in 4 minutes: they
            # healed one another in quorums of 2, step after step.
            join_timeout_ms=10_000,
        )
        for case, value in (
            ("in place first step", ours.first_step),
            ("in place group whole", ours.whole),
            ("in place rank 0 re-formed", ours.rank0_reformed),
            ("in place detection", ours.detected),
            ("in place membership", ours.published),
            ("in place re-form", ours.reformed),
            ("in place steady step", ours.steady_step),
            ("fsdp in place first step", plain.first_step),
            ("fsdp in place group whole", plain.whole),
            ("fsdp in place rank 0 re-formed", plain.rank0_reformed),
            ("fsdp in place re-form", plain.reformed),
            ("fsdp in place detection", plain.detected),
            ("fsdp in place steady step", plain.steady_step),
            ("fsdp gathered steady step", gathered.steady_step),
            ("fsdp plain peak", bare.peak_mb),
            ("fsdp plain steady step", bare.steady_step),
            ("fsdp gathered peak", gathered.peak_mb),
            ("ddp in place first step", whole.first_step),
            ("ddp in place group whole", whole.whole),
            ("ddp in place rank 0 re-formed", whole.rank0_reformed),
            ("ddp in place re-form", whole.reformed),
            ("ddp in place detection", whole.detected),
            ("ddp in place steady step", whole.steady_step),
            ("ddp in place peak", whole.peak_mb),
            ("in place peak", ours.peak_mb),
            ("fsdp in place peak", plain.peak_mb),
            ("torchft survivors in a new quorum", theirs.survivors_next),
            ("torchft next commit", theirs.next_commit),
            ("torchft replacement", theirs.replacement_first),
            ("torchft replacement healed", theirs.replacement_healed),
            ("torchft steady step", theirs.steady_step),
        ):
            samples.setdefault(case, []).append(value)
        for trial in (ours, plain, whole):
            if trial.first_step is None:
                failures.append(trial.last_error.replace("|", "/") or "no error printed")
        print(
            f"  kill {number + 1}: in place {ours.first_step} (whole {ours.whole}, step {ours.steady_step}); "
            f"plain FSDP {plain.first_step} (re-form {plain.reformed}, step {plain.steady_step}); "
            f"DDP {whole.first_step} (re-form {whole.reformed}, step {whole.steady_step}); "
            f"plain FSDP, gathered weights kept: step {gathered.steady_step}, peak {gathered.peak_mb}; "
            f"torchft survivors {theirs.survivors_next} (next commit {theirs.next_commit}), "
            f"replacement {theirs.replacement_first} (healed {theirs.replacement_healed}, step {theirs.steady_step})",
            flush=True,
        )
    for case, values in samples.items():
        run.add(case, values, "MB" if case.endswith("peak") else "s")
    run.describe(
        "in place outcome",
        f"{3 * trials - len(failures)} of {3 * trials} repaired" + (f"; {failures[-1]}" if failures else ""),
    )
