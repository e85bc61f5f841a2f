"""In place around a rank gone silent: SIGSTOP, not SIGKILL (#31).

``python -m bench.inplace_hang [TRIALS]``. The job is examples/mnist/job-inplace.yaml (1 Master + 2 Workers,
one warm spare); worker-1's training process is SIGSTOPped once it is in epoch 3. Nothing fails and nothing
closes: the others wait for it in a collective, alive. Measured against the moment of the stop, from rank 0's
repair record (``repairs.jsonl``):

- confirmed: the controller published the repair (the others said they wait on it in the group's current
  generation, and it missed three of its own announcements: ``core/policies/silent_member.py``);
- first step: the first completed step of the repaired group (the frozen rank killed, the spare joined).

The anchor, in the same run: the README's job (examples/mnist/job.yaml, a group restart) with the same stop,
from the stop to its attempt's end as Hung (the liveness deadline, 10 s by default).
"""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path

from bench import hangs, inplace
from bench.measure import median


def measure(trials: int = 3) -> list[tuple[str, str, str, str, str, str]]:
    repaired: list[dict[str, float]] = []
    accuracy: list[float] = []
    anchor: list[float] = []
    for trial in range(trials):
        with tempfile.TemporaryDirectory(prefix="bench-inplace-hang-") as work:
            _, held_out, parts = inplace._run("job-inplace.yaml", Path(work), True, signal.SIGSTOP)
        accuracy.append(held_out)
        if parts is not None:
            repaired.append(parts)
        seconds, _ = hangs.frozen_trial()
        if seconds is not None:
            anchor.append(seconds)
        first = f"{parts['first_step']:.2f}" if parts else "not repaired"
        print(f"  trial {trial + 1}: repaired in place, first step {first} s after the stop", flush=True)
    first_steps = [p["first_step"] for p in repaired]
    confirmed = [p["detection"] + p["membership"] for p in repaired]
    shown = f"{median(first_steps):.2f} ({len(repaired)} of {trials} repaired in place)" if repaired else "never"
    anchor_shown = f"group restart: named as hung after {median(anchor):.1f}" if anchor else "group restart: never"
    met = bool(repaired) and len(repaired) == trials and median(first_steps) <= 2.0
    return [
        (
            "in-place MNIST job, SIGSTOP of a member → first step of the repaired group (median s)",
            shown,
            anchor_shown,
            "",
            "≤ 2.0 s",
            "yes" if met else "**no**",
        ),
        (
            "… of which: stop → repair published (median s); held-out accuracy (median)",
            f"{median(confirmed):.2f}; {median(accuracy):.3f}" if confirmed else f"—; {median(accuracy):.3f}",
            "",
            "",
            "",
            "",
        ),
    ]


if __name__ == "__main__":
    rows = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    print("| metric | torchjob | anchor | ratio | target | met |\n|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
