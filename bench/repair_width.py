"""Where an in-place repair's time goes as the group grows, beside what one step costs at that width (#49).

The in-place MNIST job (``examples/mnist/job-inplace.yaml``, one warm spare) at 3, 8, 16 and 32 ranks, as in
``bench.width`` (its trial: the same global batch, worker-1's trainer SIGKILLed in epoch 2). From rank 0's repair
record, the kill → the repaired group's first step in five parts:

- **detection**: → rank 0's collective failed;
- **membership**: → it read the next membership the controller published;
- **formed**: → every member arrived at the store and the new gloo group was made (its connections);
- **state**: → the lowest survivor's state was sent to every member and each wrapped its new DDP;
- **step**: → the retried step completed.

The anchor, in the same trial: rank 0's **usual step** at that width (the median interval of its last 20 steps
before the kill). On this 2-core machine every rank is a process of its own, so a step of 32 ranks costs about
ten times one of 3, and the retried step is part of every repair; the **beyond a step** figure is the kill →
first step less the usual step: what the repair itself added. ``python -m bench --only repair-width``.
"""

from __future__ import annotations

from collections import defaultdict

from bench import width
from bench.records import Run

WIDTHS = width.WIDTHS
# The repair record's moments, in order, each part named by the moment it ends at.
PARTS = (
    ("detection", "failed_at"),
    ("membership", "membership_at"),
    ("formed", "formed_at"),
    ("state", "reformed_at"),
    ("step", "first_step_at"),
)


def record(run: Run, trials: int, widths: tuple[int, ...] = WIDTHS) -> None:
    samples: dict[str, list[float | None]] = defaultdict(list)
    for number in range(trials):
        for ranks in widths:
            outcome = width.trial("in place", ranks)
            at = f"at {ranks}"
            first = width.first_step("in place", outcome)
            samples[f"first step {at}"].append(first)
            samples[f"usual step {at}"].append(outcome.step)
            beyond = None if first is None or outcome.step is None else first - outcome.step
            samples[f"beyond a step {at}"].append(beyond)
            since = "sent"
            for part, moment in PARTS:
                samples[f"{part} {at}"].append(outcome.repair(moment, since=since) if outcome.ok else None)
                since = moment
            samples[f"accuracy {at}"].append(outcome.accuracy)
            shown = "never" if first is None else f"{first:.2f} s (a usual step {outcome.step or 0:.3f} s)"
            print(f"  round {number + 1}, {ranks} ranks: in place {shown}", flush=True)
    for case, values in samples.items():
        run.add(case, values, "" if "accuracy" in case else "s")
