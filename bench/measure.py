"""Small measuring helpers shared by the benchmarks: medians, watching a process's CPU and peak memory, reading
the JSONL records jobs write, finding a replica's trainer process, starting and stopping a launcher."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

BIN = Path(sys.executable).parent  # this environment's torchjob, torchrun and python
# torchrun's restarts reuse its rendezvous store, where the last attempt's keys still lie: a restarted gloo group can
# read a dead peer's address and never connect (pytorch/pytorch#135712, "Connection refused" at connectFullMesh).
# The anchor restarts as a torchrun user who knows that issue does, with its workaround set.
TORCHRUN_RESTART_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def start_launcher(
    argv: list[str], env: dict[str, str], cwd: Path | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a launcher (``torchjob run``, ``torchrun``) in a session of its own, its output to ``log`` (else
    discarded): every process in that session is then provably this run's, for ``stop_launcher``."""
    with contextlib.ExitStack() as files:
        out = files.enter_context(log.open("wb")) if log is not None else subprocess.DEVNULL
        return subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop_launcher(process: subprocess.Popen[bytes], first: signal.Signals = signal.SIGINT, grace: float = 60.0) -> None:
    """Stop a launcher ``start_launcher`` started: ``first`` (a user's Ctrl-C by default), ``grace`` seconds to
    end its job its own way, then SIGKILL to whatever is left in its session (a worker its agent left behind).
    What a launcher started in sessions of their own (torchjob's replicas) is its to stop."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(first)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # the session's group: the launcher's pid, kept while it has members
    process.wait(30)


def jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file a job writes as it runs (none yet, or half a line being written: none)."""
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def trainer_of(shim: int, script: str) -> psutil.Process | None:
    """The process running ``script`` under the replica's shim (or launcher) ``shim``; None while there is none."""
    try:
        found = [c for c in psutil.Process(shim).children(recursive=True) if script in " ".join(c.cmdline())]
    except psutil.Error:
        return None
    return found[0] if found else None


def torchrun_worker(agent: int, rank: int, script: str) -> psutil.Process | None:
    """torchrun's worker process of ``rank`` running ``script`` under the agent ``agent`` (its environment says
    which rank); None while there is none."""
    try:
        children = psutil.Process(agent).children(recursive=True)
    except psutil.Error:
        return None
    for child in children:
        try:
            if child.environ().get("RANK") == str(rank) and script in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


def last_error(log: Path) -> str:
    """The last error line a launcher's log holds, "" where none. torchrun's own summary (``ChildFailedError``)
    says only that a child failed; the child's error says why."""
    lines = log.read_text(errors="replace").splitlines()
    errors = [line for line in lines if "Error:" in line and "ChildFailedError" not in line]
    return errors[-1].strip()[:200] if errors else ""


def peak_rss_mb(pid: int) -> float:
    """A running process's peak RSS (its high-water mark, ``VmHWM``), in MB; OSError once it has gone."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class ProcessUsage:
    wall_seconds: float
    # CPU time of the process itself (not its children) per second of wall time, counted from
    # ``settle_seconds`` after start: its steady-state cost, without its own start-up.
    cpu_per_second: float
    peak_rss_mb: float
    returncode: int


def watch(
    argv: list[str], env: dict[str, str], cwd: str | None = None, interval: float = 0.05, settle_seconds: float = 3.0
) -> ProcessUsage:
    """Run ``argv`` to completion, sampling its own CPU time and peak RSS (VmHWM) until it exits."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    handle = psutil.Process(process.pid)
    cpu, peak = 0.0, 0.0
    settled: tuple[float, float] | None = None  # (wall, cpu) when start-up is over
    last_sample = started
    stop = threading.Event()

    def sample() -> None:
        nonlocal cpu, peak, settled, last_sample
        while not stop.is_set():
            try:
                times = handle.cpu_times()
                cpu = times.user + times.system
                last_sample = time.perf_counter()
                if settled is None and last_sample - started >= settle_seconds:
                    settled = (last_sample, cpu)
                peak = max(peak, peak_rss_mb(process.pid))
            except (psutil.NoSuchProcess, OSError):
                return
            stop.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = process.wait()
    wall = time.perf_counter() - started
    stop.set()
    sampler.join()
    rate = (cpu - settled[1]) / (last_sample - settled[0]) if settled and last_sample > settled[0] else float("nan")
    return ProcessUsage(wall, rate, peak, code)
