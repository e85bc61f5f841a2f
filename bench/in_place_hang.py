"""A rank frozen by SIGSTOP, not killed: nothing fails and nothing closes; the others wait for it in a collective,
alive. Two ways in one run, each timed from the stop to rank 0's first completed step of the group after it:

- **in place**: ``examples/mnist/job-inplace.yaml`` (one warm spare). The controller finds the one member the others
  wait on (they announce it; it misses its own announcements: ``core/policies/silent_member.py``), publishes the
  repair, the frozen rank is killed and the spare takes its place; also the stop → the repair published;
- **group restart**: the README's job (``examples/mnist/job.yaml``) as shipped, no annotation: the liveness
  deadline names the rank hung, the group restarts warm from its checkpoint; also the stop → the Hung verdict.

Both with worker-1 (rank 2) stopped once it trains in epoch 3, and the held-out accuracy, which the stop must not
change. ``python -m bench --only hang``.
"""

from __future__ import annotations

import signal
from collections import defaultdict

from bench import mnist_runs
from bench.records import Run


def record(run: Run, trials: int) -> None:
    samples: dict[str, list[float | None]] = defaultdict(list)
    for number in range(trials):
        repaired = mnist_runs.torchjob("job-inplace.yaml", signal.SIGSTOP)
        samples["in place first step"].append(repaired.repair("first_step_at") if repaired.ok else None)
        samples["in place repair published"].append(repaired.repair("membership_at"))
        samples["in place accuracy"].append(repaired.accuracy)
        restarted = mnist_runs.torchjob("job.yaml", signal.SIGSTOP)
        samples["restart first step"].append(restarted.first_step if restarted.ok else None)
        samples["restart named hung"].append(restarted.hung_after())
        samples["restart accuracy"].append(restarted.accuracy)
        print(
            f"  round {number + 1}: in place {samples['in place first step'][-1]}, "
            f"restart {samples['restart first step'][-1]} (hung after {samples['restart named hung'][-1]})",
            flush=True,
        )
    for case, values in samples.items():
        run.add(case, values, "" if "accuracy" in case else "s")
