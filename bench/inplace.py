"""In-place repair: what one SIGKILLed rank costs when a warm spare takes its place and the others carry on.

``python -m bench.inplace [TRIALS]``. The job is examples/mnist/job-inplace.yaml (1 Master + 2 Workers, one
warm spare, 8 epochs). In each killed trial worker-1's training process is SIGKILLed once it is in epoch 3.
Measured from rank 0's repair record (``repairs.jsonl``) against the moment of the kill:

- detection: the survivors' failed collective (they drop the broken group at once);
- membership: the controller saw the loss and published the next membership (the planner's repair);
- re-form and join: the new group formed, the state broadcast from a survivor, a new DDP everywhere;
- first step: the first completed step of the repaired group.

The anchors, in the same run: the same job with no kill (what the kill adds to the whole job), and the
README's MNIST job (examples/mnist/job.yaml: checkpoints and a group restart) with no kill and with the same
kill, today's path.

The elastic case is examples/mnist/job-elastic-inplace.yaml (3 Workers, at least 2, no idle spare; 24
epochs, so that the replacement has time to join), with the same kill. The two others carry on at once as a
smaller group (``elastic_first_step``: its first step, from the kill), and the spare started for the lost
place joins when warm (``elastic_grow_at``: when the group agreed to re-form, from the kill;
``elastic_grow_pause``: how long the others stopped for the join, from that agreement to the first step of
the grown group).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

from bench import elastic
from bench.launch import BIN
from bench.measure import median

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mnist"
ELASTIC_EPOCHS = 24
CASES = (
    ("job-inplace.yaml", False),
    ("job-inplace.yaml", True),
    ("job.yaml", False),
    ("job.yaml", True),
    ("job-elastic-inplace.yaml", True),
)


def _run(
    file: str, work: Path, kill: bool, sent: signal.Signals = signal.SIGKILL
) -> tuple[float, float, dict[str, float] | None]:
    """Wall seconds of ``torchjob run`` for the example job ``file``, the model's held-out accuracy, and the
    repair's timings if it killed (sent worker-1's trainer ``sent``: SIGSTOP freezes it instead)."""
    job = yaml.safe_load((EXAMPLE / file).read_text())
    name = job["metadata"]["name"]
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["workingDir"] = str(EXAMPLE)
        if "elastic" in file:
            # Long enough after the kill for the cold spare to start, warm and join while the others train.
            spec["template"]["spec"]["containers"][0]["args"] = ["--epochs", str(ELASTIC_EPOCHS)]
    (work / "job.yaml").write_text(yaml.safe_dump(job))
    home = work / "home"
    env = {**os.environ, "TORCHJOB_HOME": str(home), "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    run = subprocess.Popen(
        [str(BIN / "torchjob"), "run", str(work / "job.yaml")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    killed_at = None
    if kill:
        log = home / "jobs" / name / "logs" / "0" / "worker-1.log"
        while run.poll() is None and not (log.exists() and "epoch: 3/" in log.read_text(errors="replace")):
            time.sleep(0.02)
        state = json.loads((home / "jobs" / name / "local.json").read_text())
        shim = next(p["pid"] for p in state["processes"] if p["replica"] == "worker-1" and not p.get("removed"))
        trainer = psutil.Process(shim).children()[0]
        killed_at = time.time()
        trainer.send_signal(sent)
    if run.wait(timeout=600) != 0:
        raise RuntimeError(f"{file}: the job did not succeed (see {home})")
    elapsed = time.perf_counter() - started
    accuracy = float(json.loads((home / "jobs" / name / "output" / "metrics.json").read_text())["accuracy"])
    repairs = home / "jobs" / name / "output" / "repairs.jsonl"
    if killed_at is None or not repairs.exists():
        return elapsed, accuracy, None
    records = [json.loads(line) for line in repairs.read_text().splitlines()]
    record = records[0]
    parts = {
        "detection": record["failed_at"] - killed_at,
        "membership": record["membership_at"] - record["failed_at"],
        "reform": record["reformed_at"] - record["membership_at"],
        "first_step": record["first_step_at"] - killed_at,
    }
    grown = next((r for r in records if r.get("kind") == "regroup"), None)
    if grown is not None:
        parts["grow_at"] = grown["agreed_at"] - killed_at
        parts["grow_pause"] = grown["first_step_at"] - grown["agreed_at"]
    return elapsed, accuracy, parts


def measure(trials: int = 3) -> dict[str, object]:
    results: dict[str, list[float]] = {}
    parts: dict[str, list[dict[str, float]]] = {"": [], "elastic_": []}
    for trial in range(trials):
        for file, kill in CASES:
            with tempfile.TemporaryDirectory(prefix="bench-inplace-") as work:
                elapsed, accuracy, repair = _run(file, Path(work), kill)
            results.setdefault(f"{file}{' killed' if kill else ''}", []).append(elapsed)
            results.setdefault(f"{file}{' killed' if kill else ''} accuracy", []).append(accuracy)
            if repair is not None:
                parts["elastic_" if "elastic" in file else ""].append(repair)
            print(f"  trial {trial + 1}: {file}{' (rank 1 killed)' if kill else ''}: {elapsed:.1f} s", flush=True)
    summary: dict[str, object] = {key: median(values) for key, values in results.items()}
    for prefix, found in parts.items():
        for part in ("detection", "membership", "reform", "first_step", "grow_at", "grow_pause"):
            values = [p[part] for p in found if part in p]
            summary[prefix + part] = median(values) if values else None
        summary[prefix + "repaired"] = f"{len(found)} of {trials}"
    return summary


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    found = measure(count)
    # The elastic case's anchor, in the same invocation: the same loss in a torchrun elastic group (bench.elastic).
    for launcher, (seconds, failed) in elastic.measure(count).items():
        found[f"anchor elastic, {launcher}: kill → first step of the smaller group"] = seconds
        found[f"anchor elastic, {launcher}: trials that did not recover"] = failed
    for key, value in found.items():
        print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")
