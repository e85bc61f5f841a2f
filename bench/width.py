"""How repair grows with the group: a SIGKILLed rank at 3, 8, 16 and 32 ranks, each way, in one run.

At every width the same MNIST examples run with 1 Master and N − 1 Workers, the same global batch (96: 3 samples
per rank at 32), for ``EPOCHS`` epochs; worker-1's trainer (rank 2) is SIGKILLed once it trains in epoch
``KILL_EPOCH``, and each way is timed from the kill to rank 0's first completed step of the group after it:

- **in place**: ``examples/mnist/job-inplace.yaml`` (one warm spare), with its repair's parts (detection: the
  survivors' collective failed; membership: the controller published the next one; re-form: the group formed
  again with the spare and the state sent);
- **warm restart**: ``examples/mnist/job.yaml`` (``--scaling strong``: the same global batch), a group restart
  from its last checkpoint with its replicas forked from the warm interpreter;
- **torchrun**: the same script under ``torchrun --standalone --nproc-per-node N --max-restarts 3``, the anchor.

Widths take turns within each round, and the ways within each width, so that the machine's state falls on all
alike. Every rank is a process of its own on this 2-core machine (one thread each): a wide group is many
processes sharing two cores, so its steps are slower, and what grows with N here is what a real cluster's
per-rank work would not hide. ``python -m bench --only width``.
"""

from __future__ import annotations

import signal
from collections import defaultdict

from bench import mnist_runs
from bench.records import Run

WIDTHS = (3, 8, 16, 32)
EPOCHS = 4
KILL_EPOCH = 2
GLOBAL_BATCH = 96
WAYS = ("in place", "warm restart", "torchrun")


def trial(way: str, ranks: int) -> mnist_runs.Outcome:
    """One run of ``way`` at ``ranks`` ranks, its rank 2 SIGKILLed in ``KILL_EPOCH``."""
    kill = signal.SIGKILL
    if way == "in place":
        args = ["--epochs", str(EPOCHS), "--global-batch", str(GLOBAL_BATCH)]
        return mnist_runs.torchjob("job-inplace.yaml", kill, at_epoch=KILL_EPOCH, args=args, workers=ranks - 1)
    args = ["--epochs", str(EPOCHS), "--batch-size", str(GLOBAL_BATCH), "--scaling", "strong"]
    if way == "torchrun":
        return mnist_runs.torchrun(kill, at_epoch=KILL_EPOCH, ranks=ranks, args=args)
    return mnist_runs.torchjob("job.yaml", kill, at_epoch=KILL_EPOCH, args=args, workers=ranks - 1)


def first_step(way: str, outcome: mnist_runs.Outcome) -> float | None:
    if not outcome.ok:
        return None
    return outcome.repair("first_step_at") if way == "in place" else outcome.first_step


def record(run: Run, trials: int, widths: tuple[int, ...] = WIDTHS) -> None:
    samples: dict[str, list[float | None]] = defaultdict(list)
    for number in range(trials):
        for ranks in widths:
            for way in WAYS:
                outcome = trial(way, ranks)
                first = first_step(way, outcome)
                samples[f"{way} first step at {ranks}"].append(first)
                samples[f"{way} accuracy at {ranks}"].append(outcome.accuracy)
                if way == "in place":
                    samples[f"in place detection at {ranks}"].append(outcome.repair("failed_at"))
                    samples[f"in place membership at {ranks}"].append(
                        outcome.repair("membership_at", since="failed_at")
                    )
                    samples[f"in place re-form at {ranks}"].append(outcome.repair("reformed_at", since="membership_at"))
                shown = "never" if first is None else f"{first:.2f} s"
                print(f"  round {number + 1}, {ranks} ranks, {way}: kill → first step {shown}", flush=True)
    for case, values in samples.items():
        run.add(case, values, "" if "accuracy" in case else "s")
