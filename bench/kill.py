"""A SIGKILLed rank, each way it can be handled, in one run: the README's rows on a lost rank.

Four ways take turns in every round, each killing the same rank (worker-1, rank 2) of the MNIST example once it
trains in epoch 3, each timed the same way, from the kill to rank 0's first completed step of the group after it:

- **in place**: ``examples/mnist/job-inplace.yaml`` (one warm spare): the survivors stay; the step comes from rank
  0's repair record, with its parts (detection: the survivors' collective failed; membership: the controller
  published the next one; re-form: the group formed again with the spare and the state sent);
- **warm restart**: the README's job (``examples/mnist/job.yaml``) as shipped: a group restart from the last
  checkpoint, its replicas forked from the warm interpreter; with where the time goes (``restart_split``) and
  the warm interpreter's memory;
- **cold restart**: the same job with ``torchjob.io/warm-start: "false"``: every replica a new process;
- **torchrun**: the same script under ``torchrun --standalone --nproc-per-node 3 --max-restarts 3``, the anchor
  users know.

A full run also runs each job without the kill, for what the kill adds to the whole job (median killed − median
clean) and the accuracy it must not change. ``python -m bench --only kill``.
"""

from __future__ import annotations

import signal
from collections import defaultdict

from bench import mnist_runs
from bench.records import Run
from bench.restart_split import PHASES

WAYS = ("in place", "warm restart", "cold restart", "torchrun")


def _one(way: str, sent: signal.Signals | None) -> mnist_runs.Outcome:
    if way == "in place":
        return mnist_runs.torchjob("job-inplace.yaml", sent)
    if way == "torchrun":
        return mnist_runs.torchrun(sent)
    return mnist_runs.torchjob("job.yaml", sent, warm=way == "warm restart", timed_split=sent is not None)


def record(run: Run, trials: int) -> None:
    samples: dict[str, list[float | None]] = defaultdict(list)
    unit = {"warm interpreter RSS": "MB"}
    clean_too = run.mode == "full"
    failures: dict[str, list[str]] = {}
    for number in range(trials):
        for way in WAYS:
            killed = _one(way, signal.SIGKILL)
            first = killed.repair("first_step_at") if way == "in place" else killed.first_step
            samples[f"{way} first step"].append(first if killed.ok else None)
            samples[f"{way} job killed"].append(killed.seconds if killed.ok else None)
            samples[f"{way} accuracy killed"].append(killed.accuracy)
            if way == "in place":
                samples["in place detection"].append(killed.repair("failed_at"))
                samples["in place membership"].append(killed.repair("membership_at", since="failed_at"))
                samples["in place re-form"].append(killed.repair("reformed_at", since="membership_at"))
            elif way != "torchrun":
                for phase in PHASES:
                    samples[f"{way} {phase}"].append(killed.split.get(phase))
            if way == "warm restart":  # sampled outside the timed window only
                samples["warm interpreter RSS"].append(killed.warm_rss_mb or None)
            if first is None:
                failures.setdefault(way, []).append(killed.last_error.replace("|", "/") or "no error printed")
            shown = "never" if first is None else f"{first:.2f} s"
            print(f"  round {number + 1}, {way}: kill → first step {shown}; job {killed.seconds:.1f} s", flush=True)
            if clean_too:
                clean = _one(way, None)
                samples[f"{way} job clean"].append(clean.seconds if clean.ok else None)
                samples[f"{way} accuracy clean"].append(clean.accuracy)
    for case, values in samples.items():
        run.add(case, values, "" if "accuracy" in case else unit.get(case, "s"))
    for way in WAYS:  # why a way did not recover, in its launcher's words
        lost = failures.get(way, [])
        run.describe(
            f"{way} outcome", f"{trials - len(lost)} of {trials} recovered" + (f"; {lost[-1]}" if lost else "")
        )
