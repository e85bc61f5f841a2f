"""Real-size state at ~1B parameters: what fits on this 24 GB machine, measured, and what does not, said.

The GPT example's ``1b`` size (0.97B parameters: 3.9 GB of fp32 weights, 15.6 GB with their gradients and
AdamW's two moments) sharded with FSDP2 over 4 ranks (gloo, 2 cores) takes ~3.9 GB of state per rank, and each
rank's process, gathers and allocator on top. That fits; a second copy of any of it does not (4 ranks of a 1.02B
model ran out of this machine's memory as torchrun restarted them from a checkpoint). The ranks run with
``MALLOC_MMAP_THRESHOLD_`` at 1 MB under both launchers: glibc then maps every tensor of a megabyte or more on its
own and gives it back when it is freed, where by default it keeps freed buffers in its heaps (by hand, one run
each: 0.8 GB less over the 4 ranks at their peak). The benchmark's own process imports no torch while they run:
``state-1b`` runs before ``state``, whose torchft Lighthouse imports it. ``python -m bench --only state-1b``.

Measured, torchjob and torchrun alternating trial by trial (``bench/state_restart.py``'s trial at this size): a rank
SIGKILLed once the synchronous checkpoint of step ``CASE.checkpoint_every`` is committed and rank 0 has trained
``CASE.steps_before`` steps → rank 0's first step after the kill, resumed from that checkpoint: torchjob's warm
group restart against ``torchrun --max-restarts 1``. The same trials give the steady step, the synchronous save
(training blocked for all of it) and the largest rank's peak memory before the kill.

Not measured, because it does not fit, with the bytes each would need (``needs``): in place from peers' memory
(HSDP's second replica group, a neighbour's copy under plain FSDP, DDP's whole copy on every rank), an
asynchronous save (its staged copy of the weights and moments beside them), torchft (a whole copy per replica
group). The issue asks to say so rather than shrink the model.
"""

from __future__ import annotations

import psutil

from bench import state_repair, state_restart
from bench.records import Run

SIZE = "1b"
# A step takes 1.5 min here (the first, which also makes AdamW's moments, 2 min): the kill comes right after the
# checkpoint of step 2 (the steady step is step 2's, its save taken out).
CASE = state_restart.Case(
    SIZE,
    checkpoint_every=2,
    steps_before=2,
    sync_saves=True,
    timeout=1200.0,
    env={"MALLOC_MMAP_THRESHOLD_": str(1 << 20)},
)
WEIGHT, GRADIENT, MOMENTS = 4, 4, 8  # bytes per parameter: fp32 weights, their gradients, AdamW's two moments


def record(run: Run, trials: int) -> None:
    parameters = state_repair.parameters(SIZE)
    run.add("1b parameters", [parameters / 1e9], "billion")
    run.add("1b checkpoint size", [parameters * (WEIGHT + MOMENTS) / 1e9], "GB")
    for case, gigabytes in needs(parameters).items():
        run.add(f"1b {case} needs", [gigabytes], "GB")
    run.add("machine memory", [psutil.virtual_memory().total / 1e9], "GB")
    ways = {"warm restart": state_restart.warm_restart_trial, "torchrun restart": state_restart.torchrun_trial}
    samples: dict[str, list[float | None]] = {}
    errors: dict[str, str] = {}
    for number in range(trials):
        for way, trial in ways.items():
            outcome = trial(CASE)
            for reading, value in (
                ("first step", outcome.first_step),
                ("steady step", outcome.steady_step),
                ("sync save", outcome.save),
                ("peak", outcome.peak_mb),
            ):
                samples.setdefault(f"1b {way} {reading}", []).append(value)
            if outcome.error:
                errors[way] = outcome.error.replace("|", "/")
            print(f"  1b kill {number + 1}, {way}: {outcome.shown()}", flush=True)
    for case, values in samples.items():
        run.add(case, values, "MB" if case.endswith("peak") else "s")
    for way in ways:
        resumed = sum(value is not None for value in samples[f"1b {way} first step"])
        why = f"; {errors[way]}" if way in errors else ""
        run.describe(f"1b {way} outcome", f"{resumed} of {trials} resumed from step {CASE.checkpoint_every}{why}")


def needs(parameters: int) -> dict[str, float]:
    """The GB of model state (all ranks together) each layout needs at this many parameters: what fits beside
    the machine's memory, and what does not."""
    state = parameters * (WEIGHT + GRADIENT + MOMENTS) / 1e9
    kept = parameters * (WEIGHT + MOMENTS) / 1e9  # what a copy of a shard holds: weights and moments
    ranks = state_repair.RANKS
    return {
        "fsdp": state,
        # Each rank's neighbour keeps a copy of its shard; one is received beside the last while it is refreshed.
        "fsdp with copies": state + kept,
        "hsdp": state * state_repair.REPLICAS,
        "ddp": state * ranks,
        "async save": state + kept,
        "torchft": state * 2,  # its fewest replica groups that can lose one: 2, each a whole copy
    }
