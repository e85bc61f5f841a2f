"""How repair, detection, launch and memory grow with the group: 3, 8, 16 and 32 ranks, each way, in one run.

At every width the same MNIST examples run with 1 Master and N − 1 Workers, the same global batch (96: 3 samples
per rank at 32), for ``EPOCHS`` epochs; worker-1's trainer (rank 2) is sent a signal once it trains in epoch
``KILL_EPOCH``. SIGKILLed, each way is timed from the kill to rank 0's first completed step of the group after it:

- **in place**: ``examples/mnist/job-inplace.yaml`` (one warm spare), with its repair's parts (detection: the
  survivors' collective failed; membership: the controller published the next one; re-form: the group formed
  again with the spare and the state sent);
- **elastic in place**: ``examples/mnist/job-elastic-inplace.yaml`` with N Workers, at least N − 1, no idle
  spare: the survivors go on in the smaller group at once (the survivors' next step), and the replacement
  started for the lost place joins when warm (the full group back: its first step);
- **warm restart**: ``examples/mnist/job.yaml`` (``--scaling strong``: the same global batch), a group restart
  from its last checkpoint with its replicas forked from the warm interpreter;
- **torchrun**: the same script under ``torchrun --standalone --nproc-per-node N --max-restarts 3``, the anchor
  for restarts, launch and memory;
- **torchft** 0.2.0 (``bench/torchft_runs.py``): N replica groups of one process, the same model and global batch,
  the same replica SIGKILLed and restarted at once: its survivors' first step committed without it (in a quorum
  formed after the kill) and its replacement's first, the anchor that keeps survivors alive.

SIGSTOPped instead (frozen: its peers wait, alive), nothing tuned: the in-place job's stop → the repair published
(the frozen member found), and the README job's stop → the rank named Hung (the attempt's end); those runs stop
there. The killed runs also give launch → every rank's first step and the sum of the PSS of the launcher and every
process under it, taken while all ranks train (torchjob's ranks fork from one warm interpreter; torchrun's each
import torch).

Widths take turns within each round, and the ways within each width, so that the machine's state falls on all
alike. Every rank is a process of its own on this 2-core machine (one thread each): a wide group is many
processes sharing two cores, so its steps are slower, and what grows with N here is what a real cluster's
per-rank work would not hide. ``python -m bench --only width``.
"""

from __future__ import annotations

import signal
from collections import defaultdict

from bench import mnist_runs, torchft_runs
from bench.records import Run

WIDTHS = (3, 8, 16, 32)
EPOCHS = 4
KILL_EPOCH = 2
GLOBAL_BATCH = 96
KILLED = ("in place", "elastic in place", "warm restart", "torchrun")
# The ways repaired in place: each one's example job, and how many of its ranks are not Workers (a Master).
IN_PLACE = {"in place": ("job-inplace.yaml", 1), "elastic in place": ("job-elastic-inplace.yaml", 0)}


def trial(way: str, ranks: int) -> mnist_runs.Outcome:
    """One run of ``way`` at ``ranks`` ranks, its rank 2 SIGKILLed in ``KILL_EPOCH``."""
    kill = signal.SIGKILL
    if way in IN_PLACE:
        file, masters = IN_PLACE[way]
        args = ["--epochs", str(EPOCHS), "--global-batch", str(GLOBAL_BATCH)]
        return mnist_runs.torchjob(file, kill, at_epoch=KILL_EPOCH, args=args, workers=ranks - masters)
    args = ["--epochs", str(EPOCHS), "--batch-size", str(GLOBAL_BATCH), "--scaling", "strong"]
    if way == "torchrun":
        return mnist_runs.torchrun(kill, at_epoch=KILL_EPOCH, ranks=ranks, args=args)
    return mnist_runs.torchjob("job.yaml", kill, at_epoch=KILL_EPOCH, args=args, workers=ranks - 1)


def first_step(way: str, outcome: mnist_runs.Outcome) -> float | None:
    if not outcome.ok:
        return None
    return outcome.repair("first_step_at") if way in IN_PLACE else outcome.first_step


def _killed(samples: dict[str, list[float | None]], way: str, ranks: int) -> float | None:
    outcome = trial(way, ranks)
    first = first_step(way, outcome)
    at = f"at {ranks}"
    samples[f"{way} first step {at}"].append(first)
    samples[f"{way} accuracy {at}"].append(outcome.accuracy)
    samples[f"{way} launch {at}"].append(outcome.launch)
    samples[f"{way} memory {at}"].append(outcome.memory_mb)
    if way == "elastic in place":
        samples[f"elastic in place whole {at}"].append(outcome.regroup("first_step_at") if outcome.ok else None)
    if way == "in place":
        samples[f"in place detection {at}"].append(outcome.repair("failed_at"))
        samples[f"in place membership {at}"].append(outcome.repair("membership_at", since="failed_at"))
        samples[f"in place re-form {at}"].append(outcome.repair("reformed_at", since="membership_at"))
    return first


def _frozen(samples: dict[str, list[float | None]], ranks: int) -> str:
    """Rank 2 SIGSTOPped at ``ranks`` ranks: in place, the stop → the repair published; the README job, the stop
    → its first attempt's end as Hung."""
    stop, at = signal.SIGSTOP, f"at {ranks}"
    args = ["--epochs", str(EPOCHS), "--global-batch", str(GLOBAL_BATCH)]
    repaired = mnist_runs.torchjob(
        "job-inplace.yaml", stop, at_epoch=KILL_EPOCH, args=args, workers=ranks - 1, stop_once="repaired"
    )
    found = repaired.repair("membership_at")
    samples[f"in place frozen found {at}"].append(found)
    args = ["--epochs", str(EPOCHS), "--batch-size", str(GLOBAL_BATCH), "--scaling", "strong"]
    named = mnist_runs.torchjob("job.yaml", stop, at_epoch=KILL_EPOCH, args=args, workers=ranks - 1, stop_once="hung")
    hung = named.hung_after()
    samples[f"restart frozen named hung {at}"].append(hung)
    return f"frozen: found in place {found}, named hung {hung}"


def record(run: Run, trials: int, widths: tuple[int, ...] = WIDTHS) -> None:
    samples: dict[str, list[float | None]] = defaultdict(list)
    for number in range(trials):
        for ranks in widths:
            shown = []
            for way in KILLED:
                first = _killed(samples, way, ranks)
                shown.append(f"{way} {'never' if first is None else f'{first:.2f} s'}")
            ft = torchft_runs.trial(ranks, GLOBAL_BATCH)
            samples[f"torchft survivors in a new quorum at {ranks}"].append(ft.survivors_next)
            samples[f"torchft next commit at {ranks}"].append(ft.next_commit)
            samples[f"torchft replacement at {ranks}"].append(ft.replacement_first)
            samples[f"torchft launch at {ranks}"].append(ft.launch)
            shown.append(f"torchft {ft.survivors_next} / {ft.replacement_first}")
            shown.append(_frozen(samples, ranks))
            print(f"  round {number + 1}, {ranks} ranks: " + "; ".join(shown), flush=True)
    for case, values in samples.items():
        unit = "" if "accuracy" in case else "MiB" if "memory" in case else "s"
        run.add(case, values, unit)
