"""Real-size state, repaired: a rank of the GPT example's ~110M-parameter model SIGKILLed, in place against torchft.

- **in place** (``examples/gpt/job-inplace.yaml`` under ``torchjob run``): HSDP over 4 ranks, 2 replica groups of 2,
  one warm spare. Rank 3 (worker-2) is SIGKILLed once the spare waits with its heap warm (warm_heap.py) and the
  group has trained ``STEPS_BEFORE`` steps, ``STEADY_STEPS`` + 1 of them since the spare was warm; the spare takes
  rank 3 and receives its shard (weights and AdamW's moments) from rank 1, which holds the same shard in the other
  replica group. Timed from the kill to the group whole again (every member, the replacement too, holding its
  state: rank 0's repair record of the group's first collective after the re-form, which each member reaches once
  its own re-form is done), to rank 0's own re-form done (``reformed_at``), and to the repaired group's first step.
- **in place, plain FSDP** (the same job with ``--replicas 1``): FSDP over the 4 ranks, a copy of each rank's shard
  in its right neighbour's memory, stepped there with the rank's gradients every step; the spare receives rank 3's
  shard from rank 0's copy. Its steady step includes keeping the copies. The same job with each block's gathered
  weights kept from its forward to its backward (``--reshard-after-forward no``: one all-gather a step, not two,
  for the whole model's weights held through the backward) is run too, not killed: its steady step and peak.
- **in place, DDP** (the same job with ``--ddp``): nothing sharded, every rank holds the whole model and AdamW's
  state, as each of torchft's groups does; the spare receives the whole state from the 3 survivors at once.
- **torchft** 0.2.0 (``bench/torchft_runs.py``): 4 replica groups of one process, each with a whole copy of the
  same model, the same per-rank batch (the same global batch), one group SIGKILLed and restarted at once: the
  survivors' next committed step and the replacement's first (a cold start, then a heal from a live peer).

Both also give their steady step time before the kill (torchjob: rank 0's metrics, the steps after the spare was
warm, whose warming shares the cores; torchft: replica 0's commits).
Each torchjob trial also reads the largest rank's peak memory (its RSS high-water mark, ``VmHWM``) just before the
kill, and ``plain_fsdp`` the same of the plain example (``examples/gpt/job.yaml``: FSDP over the 4 ranks, no
copies, no spare, no checkpoints) after as many steps, and its steady step: what the neighbours' copies cost in memory
and in time.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

from bench.measure import BIN, jsonl, last_error, peak_rss_mb, trainer_of

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gpt"
# BATCH sequences of LENGTH tokens per rank (per torchft group) and step: a step of ~1 s on this 2-core machine, so
# that the state, not the arithmetic, is what a repair moves and waits for.
SIZE, RANKS, REPLICAS, BATCH, LENGTH = "100m", 4, 2, 1, 32
VICTIM = "worker-2"  # rank 3: its shard's copy is rank 1's under HSDP, rank 0's under plain FSDP
STEPS_BEFORE = 6  # steps the whole group trains before the kill (the first ones are slower)
# Steps timed before the kill as the steady step, once the spare's heap is warm (its warming shares the cores), and
# the step by which a spare that has not said it is warm is taken as one (the heap left alone: nothing to wait for).
STEADY_STEPS, WARM_BY = 3, 14
TIMEOUT = 900.0
# Where a failed trial's output is kept (outside the repository: it is every replica's log, tens of MB at worst).
KEPT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "torchjob-bench" / "failed-trials"


@dataclass
class InPlace:
    first_step: float | None = None  # kill → the repaired group's first step (seconds)
    detected: float | None = None  # kill → the survivors' step failed
    published: float | None = None  # the step failed → the controller's next membership read
    reformed: float | None = None  # the membership read → rank 0's re-form done (its sends too, where it sends)
    rank0_reformed: float | None = None  # kill → the same
    whole: float | None = None  # kill → the group's first collective after the re-form: every member holds its state
    steady_step: float | None = None  # median seconds between rank 0's steps before the kill
    peak_mb: float | None = None  # the largest rank's peak RSS before the kill (MB)
    steps: int = STEPS_BEFORE  # the steps trained before the kill (rank 3's)
    last_error: str = ""


def job_file(
    work: Path,
    replicas: int,
    example: str = "job-inplace.yaml",
    checkpoint_every: int = 0,
    extra: Sequence[str] = (),
    size: str = SIZE,
) -> Path:
    """The example's scripts copied into ``work`` and its job file for this benchmark's model, batch and ranks
    (``checkpoint_every`` 0: no checkpoints, where they are not what is measured; ``extra``: more of the script's
    arguments, ``--ddp`` for no sharding)."""
    for script in EXAMPLE.glob("*.py"):
        shutil.copy(script, work / script.name)
    job = yaml.safe_load((EXAMPLE / example).read_text())
    args = example_args(replicas, checkpoint_every, size) + list(extra)
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["args"] = args
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = RANKS - 1
    path = work / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def example_args(replicas: int, checkpoint_every: int = 0, size: str = SIZE) -> list[str]:
    """The example script's arguments: this benchmark's model (``size``), batch and layout, training until
    stopped."""
    args = ["--size", size, "--steps", "1000", "--replicas", str(replicas), "--batch-size", str(BATCH)]
    return [*args, "--length", str(LENGTH), "--checkpoint-every", str(checkpoint_every)]


def trainers(job: Path, script: str) -> dict[str, psutil.Process]:
    """The replicas' trainer processes (not the spares'), by replica."""
    try:
        local = json.loads((job / "local.json").read_text())
    except (OSError, ValueError):
        return {}
    found = {}
    for entry in local["processes"]:
        if entry["replica"].startswith(("master-", "worker-")) and entry.get("gone_at") is None:
            trainer = trainer_of(entry["pid"], script)
            if trainer is not None:
                found[entry["replica"]] = trainer
    return found


def peak_mb(trainers: Iterable[psutil.Process]) -> float | None:
    """The largest peak RSS among ``trainers``, in MB."""
    peaks = []
    for trainer in trainers:
        try:
            peaks.append(peak_rss_mb(trainer.pid))
        except OSError:
            continue
    return max(peaks) if peaks else None


class SpareWarmth:
    """When the waiting spare's heap was warm (torchjob.train.warm_heap: its line in the job's output), counted in the
    group's steps; a spare that says nothing by ``WARM_BY`` steps is taken as warm (nothing to warm)."""

    LINE = b"the spare's heap grown by"

    def __init__(self, log: Path) -> None:
        self.log = log
        self.at = math.inf  # when it was seen (time.time())
        self.step: int | None = None  # the group's steps done by then

    def steps_since(self, steps: int) -> int:
        """The group's steps done since the spare was warm (``steps``: done now)."""
        if self.step is None and (steps >= WARM_BY or self.LINE in self.log.read_bytes()):
            self.at, self.step = time.time(), steps
        return -1 if self.step is None else steps - self.step


@dataclass
class JobRun:
    """``torchjob run`` of the GPT example in a folder of its own (its output in ``launcher.log``)."""

    work: Path
    process: subprocess.Popen[bytes]
    last_error: str = ""  # the last error line it printed, once it is over
    failed: bool = False  # set by a trial whose repair never came: its output is kept (``KEPT``)

    def ticks(self) -> Iterator[None]:
        """Every 0.05 s while the job runs, for up to ``TIMEOUT``."""
        started = time.monotonic()
        while self.process.poll() is None and time.monotonic() - started < TIMEOUT:
            time.sleep(0.05)
            yield


@contextlib.contextmanager
def running(
    replicas: int,
    example: str = "job-inplace.yaml",
    checkpoint_every: int = 0,
    extra: Sequence[str] = (),
    size: str = SIZE,
    env: Mapping[str, str] | None = None,
) -> Iterator[JobRun]:
    """Run the example (``env``: more of its environment, which its replicas inherit); after, stop it (SIGINT) if
    it still runs, keep its last error line, remove its folder."""
    work = Path(tempfile.mkdtemp(prefix="bench-state-"))
    env = {**os.environ, **(env or {}), "TORCHJOB_HOME": str(work / "home"), "OMP_NUM_THREADS": "1"}
    command = [str(BIN / "torchjob"), "run", str(job_file(work, replicas, example, checkpoint_every, extra, size))]
    try:
        with (work / "launcher.log").open("wb") as log:
            run = JobRun(work, subprocess.Popen(command, env=env, cwd=work, stdout=log, stderr=log))
            try:
                yield run
            finally:
                if run.process.poll() is None:
                    run.process.send_signal(signal.SIGINT)
                    run.process.wait(120)
        run.last_error = last_error(work / "launcher.log")
        if run.failed:
            KEPT.mkdir(parents=True, exist_ok=True)
            kept = KEPT / f"{work.name}.log"
            shutil.copy(work / "launcher.log", kept)
            print(f"  a failed trial's output (every replica's): {kept}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class Plain:
    peak_mb: float | None = None  # the largest rank's peak RSS (MB)
    steady_step: float | None = None  # median seconds between rank 0's last steps


def plain_fsdp(steps: int = STEPS_BEFORE) -> Plain:
    """The plain example (FSDP over ``RANKS``: no copies, no spare) after ``steps`` steps (an in-place trial's before
    its kill: a rank's heap grows over the first steps): its largest rank's peak RSS, read as the in-place trials
    read theirs before the kill, and its steady step, the median of rank 0's last ``STEADY_STEPS`` steps by then
    (what the neighbours' copies add to a step is the in-place trial's over this)."""
    outcome = Plain()
    with running(1, example="job.yaml") as run:
        output = run.work / "home" / "jobs" / "gpt" / "output"
        for _ in run.ticks():
            if len(jsonl(output / "metrics" / f"rank-{RANKS - 1}.jsonl")) >= steps:
                outcome.peak_mb = peak_mb(trainers(output.parent, "train.py").values())
                break
        times = [float(r["time"]) for r in jsonl(output / "metrics" / "rank-0.jsonl")][-(STEADY_STEPS + 1) :]
        if outcome.peak_mb is not None and len(times) == STEADY_STEPS + 1:
            outcome.steady_step = statistics.median(b - a for a, b in itertools.pairwise(times))
    return outcome


def in_place_trial(
    replicas: int = REPLICAS, ddp: bool = False, extra: Sequence[str] = (), kill: bool = True
) -> InPlace:
    """The in-place example (``extra``: more of its arguments) until its spare is warm and it has trained
    ``STEPS_BEFORE`` steps, then a rank SIGKILLed and its repair timed (``kill``; otherwise only the steady step
    and the peak memory until then)."""
    outcome = InPlace()
    with running(replicas, extra=[*(["--ddp"] if ddp else []), *extra]) as run:
        job = run.work / "home" / "jobs" / "gpt-inplace"
        output = job / "output"
        sent_at = None
        warm = SpareWarmth(run.work / "launcher.log")
        for _ in run.ticks():
            if sent_at is None:
                stepped = jsonl(output / "metrics" / "rank-3.jsonl")
                ready = (output / "inplace" / "spare-0.json").exists() and warm.steps_since(len(stepped)) > STEADY_STEPS
                if len(stepped) >= STEPS_BEFORE and ready:
                    found = trainers(job, "train_in_place.py")
                    if VICTIM in found:
                        outcome.peak_mb = peak_mb(found.values())
                        outcome.steps = len(stepped)
                        sent_at = time.time()
                        if not kill:
                            break
                        found[VICTIM].send_signal(signal.SIGKILL)
            elif (repairs := jsonl(output / "repairs.jsonl")) or time.time() - sent_at > 300:
                if repairs:
                    outcome.first_step = float(repairs[0]["first_step_at"]) - sent_at
                    record = repairs[0]
                    outcome.detected = float(record["failed_at"]) - sent_at
                    outcome.published = float(record["membership_at"]) - float(record["failed_at"])
                    outcome.reformed = float(record["reformed_at"]) - float(record["membership_at"])
                    outcome.rank0_reformed = float(record["reformed_at"]) - sent_at
                    outcome.whole = float(record["whole_at"]) - sent_at
                run.failed = outcome.first_step is None or outcome.first_step > 60  # not one repair: a second
                break
        times = [float(r["time"]) for r in jsonl(output / "metrics" / "rank-0.jsonl")]
        # The steps after the spare's heap was warm (the first steps warm up; the spare's warming shares the cores).
        before = [t for t in times if warm.at <= t and (sent_at is None or t < sent_at)]
        if len(before) >= 3:
            outcome.steady_step = statistics.median(b - a for a, b in itertools.pairwise(before))
    outcome.last_error = run.last_error
    return outcome


def shard_bytes(replicas: int = REPLICAS, size: str = SIZE) -> float:
    """The bytes of one rank's shard of the weights and AdamW's two moments (fp32), the lost state sent."""
    return parameters(size) * 4 * 3 / (RANKS // replicas)


@functools.cache
def parameters(size: str = SIZE) -> int:
    """The GPT example's number of parameters at ``size``, counted in a child process: the benchmark's own process
    imports no torch (700 MB that the 1b size's ranks have no room for beside them)."""
    count = (
        "import sys; sys.path.insert(0, sys.argv[1]); import model; print(model.parameters(model.SIZES[sys.argv[2]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", count, str(EXAMPLE), size], capture_output=True, text=True, check=True, timeout=120
    )
    return int(done.stdout.strip())
