"""Real-size state, restarted: a rank of the GPT example's ~110M-parameter model SIGKILLed, and the whole group
started again from its newest DCP checkpoint, under torchjob and under torchrun.

Both run the plain example (``examples/gpt/train.py``: FSDP2 over 4 ranks, gloo, the batch of
``bench/state_repair.py``) with an asynchronous DCP checkpoint every ``CHECKPOINT_EVERY`` steps. Rank 3 is
SIGKILLed once the checkpoint of step ``CHECKPOINT_EVERY`` is committed and rank 0 has trained ``STEPS_BEFORE``
steps; timed from the kill to rank 0's first completed step after it (its metrics), which must be step
``CHECKPOINT_EVERY + 1``: the group loaded the checkpoint (a trial that resumed from elsewhere counts as failed).

- **warm group restart** (``examples/gpt/job.yaml`` under ``torchjob run``): the controller stops the survivors
  and forks the four trainers again from its warm interpreter.
- **torchrun** (``torchrun --standalone --nproc-per-node 4 --max-restarts 1``, the anchor): its agent stops the
  survivors and starts four cold processes, each importing torch (with ``bench.measure.TORCHRUN_RESTART_ENV``).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench import state_repair
from bench.measure import BIN, TORCHRUN_RESTART_ENV, jsonl, last_error, start_launcher, stop_launcher, torchrun_worker
from bench.records import Run

CHECKPOINT_EVERY = 3
STEPS_BEFORE = 5  # rank 0's steps before the kill: the checkpoint of step 3 committed, two steps after it
VICTIM_RANK = state_repair.RANKS - 1


def record(run: Run, trials: int) -> None:
    """torchjob's warm group restart and torchrun's, alternating trial by trial."""
    ways = {"warm restart": warm_restart_trial, "torchrun restart": torchrun_trial}
    samples: dict[str, list[float | None]] = {way: [] for way in ways}
    errors: dict[str, str] = {}
    for number in range(trials):
        for way, trial in ways.items():
            outcome = trial()
            samples[way].append(outcome.first_step)
            if outcome.error:
                errors[way] = outcome.error.replace("|", "/")
            shown = "never" if outcome.first_step is None else f"{outcome.first_step:.2f} s"
            print(f"  kill {number + 1}, {way}: {shown} {outcome.error}".rstrip(), flush=True)
    for way, values in samples.items():
        run.add(f"{way} first step", values)
        resumed = sum(value is not None for value in values)
        why = f"; {errors[way]}" if way in errors else ""
        run.describe(f"{way} outcome", f"{resumed} of {trials} resumed from step {CHECKPOINT_EVERY}{why}")


@dataclass
class Restarted:
    first_step: float | None = None  # kill → rank 0's first step after it (seconds)
    error: str = ""  # why the trial did not count


def warm_restart_trial() -> Restarted:
    """The example under ``torchjob run``: a warm group restart from the checkpoint."""
    with state_repair.running(1, example="job.yaml", checkpoint_every=CHECKPOINT_EVERY) as run:
        job = run.work / "home" / "jobs" / "gpt"

        def victim() -> psutil.Process | None:
            return state_repair.trainers(job, "train.py").get(f"worker-{VICTIM_RANK - 1}")

        outcome = _killed(run, job / "output", victim)
    if outcome.first_step is None and not outcome.error:
        outcome.error = run.last_error or "no step after the kill"
    return outcome


def torchrun_trial() -> Restarted:
    """The same script under ``torchrun --max-restarts 1``: its agent restarts the group, cold."""
    work = Path(tempfile.mkdtemp(prefix="bench-state-torchrun-"))
    try:
        state_repair.job_file(work, 1, "job.yaml")  # the example's scripts, copied into ``work``
        output = work / "output"
        env = {**os.environ, **TORCHRUN_RESTART_ENV, "TORCHJOB_OUTPUT_DIR": str(output), "OMP_NUM_THREADS": "1"}
        argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(state_repair.RANKS)]
        argv += ["--max-restarts", "1", "train.py", *state_repair.example_args(1, CHECKPOINT_EVERY)]
        agent = start_launcher(argv, env, work, work / "torchrun.log")
        try:

            def victim() -> psutil.Process | None:
                return torchrun_worker(agent.pid, VICTIM_RANK, "train.py")

            outcome = _killed(state_repair.JobRun(work, agent), output, victim)
        finally:
            stop_launcher(agent, signal.SIGTERM)
        if outcome.first_step is None and not outcome.error:
            outcome.error = last_error(work / "torchrun.log") or "no step after the kill"
        return outcome
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _killed(run: state_repair.JobRun, output: Path, victim: Callable[[], psutil.Process | None]) -> Restarted:
    """Kill ``victim()`` once the checkpoint is committed and rank 0 has trained enough; time rank 0's next step."""
    outcome = Restarted()
    metrics = output / "metrics" / "rank-0.jsonl"
    manifest = output / "checkpoints" / f"step-{CHECKPOINT_EVERY:012d}.json"
    sent_at: float | None = None
    for _ in run.ticks():
        if sent_at is None:
            if manifest.exists() and len(jsonl(metrics)) >= STEPS_BEFORE and (process := victim()) is not None:
                sent_at = time.time()
                process.send_signal(signal.SIGKILL)
            continue
        after = [row for row in jsonl(metrics) if float(row["time"]) > sent_at]
        if after:
            resumed_at = int(after[0]["step"])  # CHECKPOINT_EVERY + 1 where the group loaded the checkpoint
            if resumed_at == CHECKPOINT_EVERY + 1:
                outcome.first_step = float(after[0]["time"]) - sent_at
            else:
                outcome.error = f"resumed at step {resumed_at}, not from the checkpoint of {CHECKPOINT_EVERY}"
            return outcome
        if time.time() - sent_at > 300:
            break
    return outcome
