"""The MNIST examples run as a user runs them, for the local benchmarks: under ``torchjob run`` (as shipped, warm or
cold) or under ``torchrun`` (the anchor), optionally with one rank's trainer sent a signal once it trains in a
given epoch, and what the run leaves read back before its folder goes: the job's time and accuracy, rank 0's first
step after the signal (``metrics/rank-0.jsonl``, in a later attempt), its in-place repair records, its status.

Every trial runs in a folder of its own, deleted afterwards; ``Outcome`` carries what the benchmarks keep.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.measure import (
    BIN,
    TORCHRUN_RESTART_ENV,
    jsonl,
    last_error,
    start_launcher,
    stop_launcher,
    torchrun_worker,
    trainer_of,
)
from bench.restart_split import AttemptWatch, split

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mnist"
TIMEOUT = 600.0
# A run that has not stepped again this long after the signal is stopped: it did not recover (a cold restart takes
# about 6 s here; torchrun's failing restarts can hang).
AFTER_SIGNAL = 45.0
VICTIM_RANK = 2  # worker-1: the rank the README's walk-through kills


@dataclass
class Outcome:
    seconds: float
    ok: bool
    accuracy: float | None = None
    sent_at: float | None = None  # when the signal was sent (epoch seconds)
    first_step: float | None = None  # rank 0's first completed step in a later attempt, seconds after the signal
    repairs: list[dict[str, Any]] = field(default_factory=list)  # repairs.jsonl (in-place repair), as written
    status: dict[str, Any] = field(default_factory=dict)  # the job's status when it ended
    split: dict[str, float] = field(default_factory=dict)  # where a group restart's time went (restart_split)
    warm_rss_mb: float = 0.0  # the warm interpreter's largest RSS seen outside the timed window
    launch: float | None = None  # launch → every rank's first completed step (seconds)
    step: float | None = None  # rank 0's usual step before the signal: the median interval of its last steps
    memory_mb: float | None = None  # the sum of the PSS of the launcher and all its descendants, before the signal
    last_error: str = ""  # the launcher's output's last line naming an error (why a run did not recover)

    def repair(self, key: str, since: str = "sent") -> float | None:
        """Seconds from the signal (or from another of the first repair record's moments) to ``key`` in it."""
        if not self.repairs or self.sent_at is None:
            return None
        start = self.sent_at if since == "sent" else float(self.repairs[0][since])
        return float(self.repairs[0][key]) - start

    def regroup(self, key: str, since: str | None = None) -> float | None:
        """The same for the elastic group's grow-back record (kind ``regroup``)."""
        grown = next((r for r in self.repairs if r.get("kind") == "regroup"), None)
        if grown is None or self.sent_at is None:
            return None
        return float(grown[key]) - (self.sent_at if since is None else float(grown[since]))

    def hung_after(self) -> float | None:
        """Seconds from the signal to the end of the first attempt as Hung (the planner's verdict)."""
        from torchjob.core.times import parse_timestamp

        attempts = self.status.get("attempts") or []
        if not attempts or self.sent_at is None or not str(attempts[0].get("outcome", "")).startswith("Hung"):
            return None
        return parse_timestamp(attempts[0]["endTime"]).timestamp() - self.sent_at


def job_file(
    work: Path, file: str, warm: bool = True, args: list[str] | None = None, workers: int | None = None
) -> tuple[Path, str]:
    """The example job ``file`` written into ``work`` beside a copy of the example's scripts (its working folder,
    as a user's would be), cold where ``warm`` is False, with the containers' ``args`` and the number of Workers
    replaced where given (an elastic job's bounds with them)."""
    for source in EXAMPLE.glob("*.py"):
        shutil.copy(source, work / source.name)
    job = yaml.safe_load((EXAMPLE / file).read_text())
    if not warm:
        job["metadata"].setdefault("annotations", {})["torchjob.io/warm-start"] = "false"
    if args is not None:
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            spec["template"]["spec"]["containers"][0]["args"] = args
    if workers is not None:
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
        elastic = job["spec"].get("elasticPolicy")
        if elastic is not None:  # as wide, with the file's slack: its minimum that many below its maximum
            slack = elastic["maxReplicas"] - elastic["minReplicas"]
            elastic.update(minReplicas=workers - slack, maxReplicas=workers)
    path = work / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path, str(job["metadata"]["name"])


def container_args(path: Path) -> list[str]:
    """The Master's ``args`` in the job file ``path``: what a torchrun user passes the same script."""
    spec = yaml.safe_load(path.read_text())["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    return [str(a) for a in spec["containers"][0].get("args") or []]


def first_steps(output: Path, ranks: int) -> list[float] | None:
    """When each of ``ranks`` ranks completed its first step (epoch seconds), once every one of them has."""
    found = [jsonl(output / "metrics" / f"rank-{rank}.jsonl") for rank in range(ranks)]
    return [float(records[0]["time"]) for records in found] if all(found) else None


def _in_epoch(output: Path, rank: int, epoch: int) -> bool:
    """Whether ``rank`` has completed a step of ``epoch`` (its metrics file, written at every step)."""
    records = jsonl(output / "metrics" / f"rank-{rank}.jsonl")
    return bool(records) and int(records[-1].get("epoch", 0)) >= epoch


def _first_step_after(output: Path, sent_at: float) -> float | None:
    """Rank 0's first step completed in a later attempt than the first, in seconds after ``sent_at``."""
    later = [r for r in jsonl(output / "metrics" / "rank-0.jsonl") if int(r.get("attempt", 0)) > 0]
    return float(later[0]["time"]) - sent_at if later else None


def _steady_step(output: Path, sent_at: float, steps: int = 20) -> float | None:
    """Rank 0's median interval between consecutive steps over its last ``steps`` before ``sent_at`` (what one
    step costs at this width on this machine, its data and everything else included)."""
    times = [float(r["time"]) for r in jsonl(output / "metrics" / "rank-0.jsonl") if float(r["time"]) < sent_at]
    intervals = [later - earlier for earlier, later in itertools.pairwise(times[-steps - 1 :])]
    return statistics.median(intervals) if intervals else None


def _stepped_again(output: Path, sent_at: float) -> bool:
    """The group trained again after the signal: repaired in place, or a later attempt's first step."""
    return bool(jsonl(output / "repairs.jsonl")) or _first_step_after(output, sent_at) is not None


def _launch(output: Path, launched_at: float) -> float | None:
    """Seconds from ``launched_at`` to the last rank's first completed step, over the ranks that have stepped."""
    firsts = [records[0]["time"] for path in output.glob("metrics/rank-*.jsonl") if (records := jsonl(path))]
    return max(float(first) for first in firsts) - launched_at if firsts else None


def tree_pss_mb(root: int) -> float | None:
    """The proportional set size of ``root`` and every process under it, summed (MiB): what the job costs the
    machine, shared pages (torch's, forked from a warm interpreter) counted once among their sharers."""
    try:
        processes = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for process in processes:
        try:
            total += process.memory_full_info().pss
        except psutil.Error:
            continue  # gone meanwhile: it holds nothing now
    return total / 2**20


def _warm_interpreter_rss() -> float:
    for candidate in psutil.process_iter():
        try:
            if "(warm interpreter)" in " ".join(candidate.cmdline()):
                return float(candidate.memory_info().rss) / 2**20
        except psutil.Error:
            continue
    return 0.0


def _run(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    output: Path,
    victim: Callable[[int], psutil.Process | None],  # the launcher's pid → the process to signal
    sent: signal.Signals | None,
    at_epoch: int,
    watch: AttemptWatch | None,
    enough: Callable[[], bool] | None = None,  # after the signal: whether the run has shown what it is for
) -> Outcome:
    started, launched_at = time.monotonic(), time.time()
    log = cwd / "launcher.log"
    process = start_launcher(argv, env, cwd, log)
    sent_at: float | None = None
    recovered = False  # once seen stepping again after the signal
    rss = 0.0
    launch: float | None = None
    memory: float | None = None
    try:
        while process.poll() is None and time.monotonic() - started < TIMEOUT:
            if sent_at is not None and not recovered and time.time() - sent_at > AFTER_SIGNAL:
                recovered = _stepped_again(output, sent_at)
                if not recovered:
                    break
            if sent_at is not None and enough is not None and enough():
                break
            timing = sent_at is not None and (watch is None or not watch.done)
            if not timing and watch is not None:  # not while a restart is timed: it would load the machine
                rss = max(rss, _warm_interpreter_rss())
            if sent is not None and sent_at is None and _in_epoch(output, VICTIM_RANK, at_epoch):
                trainer = victim(process.pid)
                if trainer is not None and memory is None:  # every rank trains: what the job costs, and its launch
                    launch, memory = _launch(output, launched_at), tree_pss_mb(process.pid)
                    continue  # the victim is found again after the measurement, which takes a while at 32 ranks
                if trainer is not None:
                    if watch is not None:
                        watch.at_kill()
                    sent_at = time.time()
                    trainer.send_signal(sent)
            if timing and watch is not None:
                watch.poll()
            time.sleep(0.01 if timing else 0.05)
    finally:
        stop_launcher(process)
    outcome = Outcome(seconds=time.monotonic() - started, ok=process.returncode == 0, sent_at=sent_at)
    outcome.last_error = last_error(log)
    results = output / "metrics.json"
    if results.exists():
        outcome.accuracy = float(json.loads(results.read_text())["accuracy"])
    if sent_at is not None:
        outcome.first_step = _first_step_after(output, sent_at)
        outcome.step = _steady_step(output, sent_at)
    outcome.repairs = jsonl(output / "repairs.jsonl")
    outcome.warm_rss_mb = rss
    outcome.launch, outcome.memory_mb = launch, memory
    return outcome


def torchjob(
    file: str,
    sent: signal.Signals | None = None,
    warm: bool = True,
    at_epoch: int = 3,
    args: list[str] | None = None,
    timed_split: bool = False,
    workers: int | None = None,
    stop_once: str | None = None,
) -> Outcome:
    """``torchjob run`` of the example job ``file``; ``sent`` to worker-1's trainer once it trains in ``at_epoch``.
    ``timed_split``: also where a group restart's time goes (the README job's phases, ``restart_split``);
    ``workers``: that many Workers instead of the file's; ``stop_once``: ``"hung"``, stopped once its first attempt
    has ended as Hung, ``"repaired"``, once it has repaired in place (what is measured is the verdict, not the rest
    of the training)."""
    work = Path(tempfile.mkdtemp(prefix="bench-mnist-"))
    try:
        path, name = job_file(work, file, warm, args, workers)
        home = work / "home"
        job = home / "jobs" / name
        first = next(iter(yaml.safe_load(path.read_text())["spec"]["pytorchReplicaSpecs"].values()))
        script_name = first["template"]["spec"]["containers"][0]["command"][-1]  # an elastic job has no Master

        def victim(_: int) -> psutil.Process | None:
            try:
                local = json.loads((job / "local.json").read_text())
            except (OSError, ValueError):
                return None
            shims = [p["pid"] for p in local["processes"] if p["replica"] == "worker-1" and p.get("gone_at") is None]
            return trainer_of(shims[0], script_name) if shims else None

        env = {**os.environ, "TORCHJOB_HOME": str(home), "OMP_NUM_THREADS": "1"}
        watch = AttemptWatch(home, name) if timed_split else None
        argv = [str(BIN / "torchjob"), "run", str(path)]

        def status() -> dict[str, Any]:
            try:
                return dict(json.loads((job / "job.json").read_text()).get("status") or {})
            except (OSError, ValueError):
                return {}

        def hung() -> bool:
            attempts = status().get("attempts") or []
            return bool(attempts) and str(attempts[0].get("outcome", "")).startswith("Hung")

        def repaired() -> bool:
            return bool(jsonl(job / "output" / "repairs.jsonl"))

        enough = {"hung": hung, "repaired": repaired, None: None}[stop_once]
        outcome = _run(argv, env, work, job / "output", victim, sent, at_epoch, watch, enough)
        outcome.status = status()
        if watch is not None and outcome.sent_at is not None:
            outcome.split = split(home, outcome.sent_at, watch, name)
        return outcome
    finally:
        shutil.rmtree(work, ignore_errors=True)


def torchrun(
    sent: signal.Signals | None = None,
    at_epoch: int = 3,
    max_restarts: int = 3,
    ranks: int = 3,
    args: list[str] | None = None,
) -> Outcome:
    """The README's job as a torchrun user runs it: ``torchrun --standalone --nproc-per-node 3 --max-restarts 3
    train.py`` with the job's own arguments (or ``args``), ``ranks`` processes; ``sent`` to rank 2's process once
    it trains in ``at_epoch``."""
    work = Path(tempfile.mkdtemp(prefix="bench-torchrun-"))
    try:
        path, _ = job_file(work, "job.yaml")
        output = work / "output"
        env = {**os.environ, **TORCHRUN_RESTART_ENV, "TORCHJOB_OUTPUT_DIR": str(output), "OMP_NUM_THREADS": "1"}
        argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(ranks), f"--max-restarts={max_restarts}"]
        argv += ["train.py", *(container_args(path) if args is None else args)]

        def victim(agent: int) -> psutil.Process | None:
            return torchrun_worker(agent, VICTIM_RANK, "train.py")

        return _run(argv, env, work, output, victim, sent, at_epoch, None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
