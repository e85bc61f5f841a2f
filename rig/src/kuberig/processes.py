"""The rig's processes: start one with its log and the cluster's mark, tell whether it still lives, stop it.

Stateless: callers keep the returned :class:`Process` records (``state.py``). Every process carries the
cluster's name in its environment (``KUBERIG_CLUSTER``), so ``delete`` finds it even when the state is lost
(kind's "no external state": the truth is on the things themselves). A pid is trusted only with its start
time, so a reused pid is never signalled. That start time is the kernel's count since boot, never a date: a date
is derived from the boot time, which moves when the wall clock is stepped, and every process would then read dead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

CLUSTER_ENV = "KUBERIG_CLUSTER"
Check = Callable[[], bool]


@dataclass
class Process:
    name: str
    pid: int
    started_at: float  # seconds after boot (the kernel's count): no clock step moves it
    argv: list[str] = field(default_factory=list)


def spawn(cluster: str, logs: Path, name: str, argv: list[str]) -> Process:
    """Start ``argv`` in a session of its own, its output appended to ``logs/NAME.log``."""
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.log", "ab") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, CLUSTER_ENV: cluster},
        )
    # The child exists once Popen returns (a zombie at worst, which reads as never started).
    return Process(name, process.pid, _start_time(process.pid) or 0.0, argv)


def _start_time(pid: int) -> float | None:
    """Seconds after boot at which ``pid`` started; None for a zombie or no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] == "Z":
        return None
    # Field 22 of /proc/PID/stat is the start time in clock ticks since boot: it tells a reused pid apart.
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def alive(process: Process) -> bool:
    started = _start_time(process.pid)
    return started is not None and abs(started - process.started_at) < 0.001  # under one tick: the same count


def marked(cluster: str) -> set[int]:
    """The pids whose environment names ``cluster``: what the rig started for it, and their children."""
    mark = f"{CLUSTER_ENV}={cluster}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    found.add(int(entry.name))
    return found


def stop(processes: Iterable[Process], grace: float = 10) -> None:
    """SIGTERM each live process's group, then SIGKILL what is left after ``grace`` seconds."""
    live = [p for p in processes if alive(p)]
    for process in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in live):
        time.sleep(0.1)
    for process in live:
        if alive(process):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)


def kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_for(
    what: str, check: Check, timeout: float, watched: Iterable[Process] = (), logs: Path | None = None
) -> None:
    """Poll ``check`` until it is true; fail early, with its log's tail, if a ``watched`` process dies."""
    watched = list(watched)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        dead = [p.name for p in watched if not alive(p)]
        if dead:
            log = (logs or Path()) / f"{dead[0]}.log"
            tail = log.read_text(errors="replace")[-3000:] if logs and log.exists() else ""
            raise RuntimeError(f"{dead[0]} exited while waiting for {what}; its log ends:\n{tail}")
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}" + (f" (logs in {logs})" if logs else ""))


def run(*argv: str) -> str:
    """Run a short command; its stdout, or an error with its stderr."""
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout
