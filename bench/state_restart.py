"""Real-size state, restarted: a rank of the GPT example SIGKILLed, and the whole group started again from its
newest DCP checkpoint, under torchjob and under torchrun.

Both run the plain example (``examples/gpt/train.py``: FSDP2 over 4 ranks, gloo, the batch of
``bench/state_repair.py``) with a DCP checkpoint every ``Case.checkpoint_every`` steps (asynchronous, but for
``sync_saves``). Rank 3 is SIGKILLed once the checkpoint of that step is committed and rank 0 has trained
``Case.steps_before`` steps; timed from the kill to rank 0's first completed step after it (its metrics), which
must be the checkpoint's next: the group loaded the checkpoint (a trial that resumed from elsewhere counts as
failed). ``CASE`` is the ~110M model's (``python -m bench --only state-restart``); ``bench/state_large.py`` runs
the ~1B one.

- **warm group restart** (``examples/gpt/job.yaml`` under ``torchjob run``): the controller stops the survivors
  and forks the four trainers again from its warm interpreter.
- **torchrun** (``torchrun --standalone --nproc-per-node 4 --max-restarts 1``, the anchor): its agent stops the
  survivors and starts four cold processes, each importing torch (with ``bench.measure.TORCHRUN_RESTART_ENV``).
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench import state_repair
from bench.measure import BIN, TORCHRUN_RESTART_ENV, jsonl, last_error, start_launcher, stop_launcher, torchrun_worker
from bench.records import Run


@dataclass(frozen=True)
class Case:
    """A model size and when its trial kills: once the checkpoint of step ``checkpoint_every`` is committed and rank
    0 has trained ``steps_before`` steps."""

    size: str
    checkpoint_every: int
    steps_before: int
    sync_saves: bool = False  # training waits for each save (the 1b size has no room for an asynchronous one's copy)
    timeout: float = 300.0  # seconds from the kill to rank 0's next step before a trial counts as failed
    env: Mapping[str, str] = field(default_factory=dict)  # for the ranks, under either launcher

    def args(self) -> list[str]:
        return ["--sync-checkpoints"] if self.sync_saves else []


CASE = Case("100m", checkpoint_every=3, steps_before=5)  # the checkpoint of step 3 committed, two steps after it
VICTIM_RANK = state_repair.RANKS - 1


def record(run: Run, trials: int) -> None:
    """torchjob's warm group restart and torchrun's, alternating trial by trial."""
    ways = {"warm restart": warm_restart_trial, "torchrun restart": torchrun_trial}
    samples: dict[str, list[float | None]] = {way: [] for way in ways}
    errors: dict[str, str] = {}
    for number in range(trials):
        for way, trial in ways.items():
            outcome = trial(CASE)
            samples[way].append(outcome.first_step)
            if outcome.error:
                errors[way] = outcome.error.replace("|", "/")
            print(f"  kill {number + 1}, {way}: {outcome.shown()}", flush=True)
    for way, values in samples.items():
        run.add(f"{way} first step", values)
        resumed = sum(value is not None for value in values)
        why = f"; {errors[way]}" if way in errors else ""
        run.describe(f"{way} outcome", f"{resumed} of {trials} resumed from step {CASE.checkpoint_every}{why}")


@dataclass
class Restarted:
    first_step: float | None = None  # kill → rank 0's first step after it (seconds)
    steady_step: float | None = None  # rank 0's median step before the kill, a save's time taken out (seconds)
    save: float | None = None  # rank 0's time blocked by the checkpoint the group restarts from (seconds)
    peak_mb: float | None = None  # the largest rank's peak RSS before the kill (MB)
    error: str = ""  # why the trial did not count

    def shown(self) -> str:
        shown = "never" if self.first_step is None else f"{self.first_step:.2f} s"
        return f"{shown} (steady step {self.steady_step}, save {self.save}, peak {self.peak_mb} MB) {self.error}"


def warm_restart_trial(case: Case) -> Restarted:
    """The example under ``torchjob run``: a warm group restart from the checkpoint."""
    with state_repair.running(
        1, example="job.yaml", checkpoint_every=case.checkpoint_every, extra=case.args(), size=case.size, env=case.env
    ) as run:
        job = run.work / "home" / "jobs" / "gpt"

        def members() -> dict[int, psutil.Process]:
            found = state_repair.trainers(job, "train.py")
            return {rank: found[name] for rank, name in enumerate(_replicas()) if name in found}

        outcome = _killed(run, job / "output", members, case)
    if outcome.first_step is None and not outcome.error:
        outcome.error = run.last_error or "no step after the kill"
    return outcome


def _replicas() -> list[str]:
    return ["master-0", *(f"worker-{index}" for index in range(state_repair.RANKS - 1))]


def torchrun_trial(case: Case) -> Restarted:
    """The same script under ``torchrun --max-restarts 1``: its agent restarts the group, cold."""
    work = Path(tempfile.mkdtemp(prefix="bench-state-torchrun-"))
    try:
        state_repair.job_file(work, 1, "job.yaml")  # the example's scripts, copied into ``work``
        output = work / "output"
        env = {**os.environ, **TORCHRUN_RESTART_ENV, "TORCHJOB_OUTPUT_DIR": str(output), "OMP_NUM_THREADS": "1"}
        env.update(case.env)
        argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(state_repair.RANKS)]
        argv += ["--max-restarts", "1", "train.py"]
        argv += [*state_repair.example_args(1, case.checkpoint_every, case.size), *case.args()]
        agent = start_launcher(argv, env, work, work / "torchrun.log")
        try:

            def members() -> dict[int, psutil.Process]:
                found = {rank: torchrun_worker(agent.pid, rank, "train.py") for rank in range(state_repair.RANKS)}
                return {rank: process for rank, process in found.items() if process is not None}

            outcome = _killed(state_repair.JobRun(work, agent), output, members, case)
        finally:
            stop_launcher(agent, signal.SIGTERM)
        if outcome.first_step is None and not outcome.error:
            outcome.error = last_error(work / "torchrun.log") or "no step after the kill"
        return outcome
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _killed(
    run: state_repair.JobRun, output: Path, members: Callable[[], dict[int, psutil.Process]], case: Case
) -> Restarted:
    """Kill rank ``VICTIM_RANK`` once the checkpoint is committed and rank 0 has trained enough; time rank 0's next
    step, which must be the checkpoint's next."""
    outcome = Restarted()
    metrics = output / "metrics" / "rank-0.jsonl"
    manifest = output / "checkpoints" / f"step-{case.checkpoint_every:012d}.json"
    sent_at: float | None = None
    for _ in run.ticks():
        if sent_at is None:
            if manifest.exists() and len(jsonl(metrics)) >= case.steps_before:
                found = members()
                if VICTIM_RANK in found:
                    outcome.peak_mb = state_repair.peak_mb(found.values())
                    _read_steps(outcome, jsonl(metrics), case)
                    sent_at = time.time()
                    found[VICTIM_RANK].send_signal(signal.SIGKILL)
            continue
        after = [row for row in jsonl(metrics) if float(row["time"]) > sent_at]
        if after:
            resumed_at = int(after[0]["step"])  # checkpoint_every + 1 where the group loaded the checkpoint
            if resumed_at == case.checkpoint_every + 1:
                outcome.first_step = float(after[0]["time"]) - sent_at
            else:
                outcome.error = f"resumed at step {resumed_at}, not from the checkpoint of {case.checkpoint_every}"
            return outcome
        if time.time() - sent_at > case.timeout:
            break
    return outcome


def _read_steps(outcome: Restarted, rows: list[dict[str, Any]], case: Case) -> None:
    """Rank 0's steady step (its steps after the first, each less the save it made) and the save of the
    checkpoint the group will restart from."""
    steps = [float(row["step_seconds"]) - float(row["checkpoint_seconds"]) for row in rows[1:]]
    outcome.steady_step = statistics.median(steps) if steps else None
    saves = [float(row["checkpoint_seconds"]) for row in rows if int(row["step"]) == case.checkpoint_every]
    outcome.save = saves[0] if saves else None
