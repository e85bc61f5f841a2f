"""Small measuring helpers shared by the benchmarks: medians, watching a process's CPU and peak memory."""

from __future__ import annotations

import statistics
import subprocess
import threading
import time
from dataclasses import dataclass

import psutil


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class ProcessUsage:
    wall_seconds: float
    cpu_seconds: float  # the process itself, not its children
    peak_rss_mb: float
    returncode: int


def watch(argv: list[str], env: dict[str, str], cwd: str | None = None, interval: float = 0.05) -> ProcessUsage:
    """Run ``argv`` to completion, sampling its own CPU time and peak RSS (VmHWM) until it exits."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    handle = psutil.Process(process.pid)
    cpu, peak = 0.0, 0.0
    stop = threading.Event()

    def sample() -> None:
        nonlocal cpu, peak
        while not stop.is_set():
            try:
                times = handle.cpu_times()
                cpu = times.user + times.system
                with open(f"/proc/{process.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak = max(peak, int(line.split()[1]) / 1024)
            except (psutil.NoSuchProcess, OSError):
                return
            stop.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = process.wait()
    wall = time.perf_counter() - started
    stop.set()
    sampler.join()
    return ProcessUsage(wall, cpu, peak, code)
