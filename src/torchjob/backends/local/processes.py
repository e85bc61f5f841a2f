"""Local processes: start them, tell whether they live, signal them — only ever the ones torchjob can prove
are its own. The one home of liveness and killing on the local backend; every signal torchjob sends to a
process it did not just fork goes through here.

A recorded pid proves nothing: the OS reuses pids (pid_max is 32768 on many machines, and after a reboot
every recorded pid is stale). So torchjob proves ownership two ways at once:

- **identity**: the pid *and* the kernel's start time of that pid (``Identity``), recorded when the process
  was started. A reused pid has another start time. The start time is the kernel's own count since boot, not
  a wall-clock date: a date is derived from the boot time, which moves whenever the clock is stepped (NTP, a
  VM restored), and a process judged "not the one recorded" after a step would be taken for dead.
- **a marker torchjob owns**: every replica process is started with ``TORCHJOB_JOB_UID=<the job's uid>``
  in its environment, which everything it forks inherits; a controller holds an exclusive lock on its
  job's ``controller.lock`` for as long as it lives.

A process that fails either proof is left alone, whatever a record on disk says.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

# The marker every replica process (and whatever it forks) carries in its environment.
MARKER_ENV = "TORCHJOB_JOB_UID"


@dataclass(frozen=True)
class Identity:
    """A process as the kernel knows it: its pid and when it started (seconds since the epoch)."""

    pid: int
    started: float


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Less than one clock tick (1/100 s): the same process reads the same count; JSON keeps the float exact.
_SAME_START = 0.001


def _kernel_start(process: psutil.Process) -> float:
    """When the kernel started ``process``: seconds since boot on Linux (field 22 of /proc/PID/stat, a count no
    clock step changes); elsewhere psutil's date, the best that platform offers."""
    if not sys.platform.startswith("linux"):
        return process.create_time()
    try:
        with open(f"/proc/{process.pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        raise psutil.NoSuchProcess(process.pid) from None
    return int(fields[19]) / _CLOCK_TICKS


def identify(pid: int) -> Identity | None:
    """The identity of the live process ``pid``, to record right after starting it."""
    try:
        return Identity(pid, _kernel_start(psutil.Process(pid)))
    except psutil.Error:
        return None


def find(identity: Identity | None) -> psutil.Process | None:
    """The process with this identity, if it still runs (a zombie does not); None for any other process."""
    if identity is None or identity.pid <= 0:
        return None
    try:
        process = psutil.Process(identity.pid)
        if abs(_kernel_start(process) - identity.started) > _SAME_START:
            return None
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process
    except psutil.Error:
        return None


def carries_marker(process: psutil.Process, job_uid: str | None) -> bool:
    """Whether ``process`` was started for the job ``job_uid`` (its environment carries the marker)."""
    if not job_uid:
        return False
    try:
        return process.environ().get(MARKER_ENV) == job_uid
    except psutil.Error:
        return False  # gone, or not ours to read: not provably ours


def replica(identity: Identity | None, job_uid: str | None) -> psutil.Process | None:
    """The replica (shim) process with this identity, if it lives and carries the job's marker."""
    process = find(identity)
    return process if process is not None and carries_marker(process, job_uid) else None


def signal_group(identity: Identity | None, job_uid: str | None, signum: int) -> None:
    """Send ``signum`` to a replica's process group (the shim leads it).

    While the proven leader lives, its group id cannot be reused, so the whole group is signalled at once.
    Without it, only the group's members that carry the job's marker are.
    """
    if identity is None:
        return
    if replica(identity, job_uid) is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(identity.pid, signum)
        return
    for process in marked(job_uid):
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == identity.pid:
                process.send_signal(signum)


def kill_tree(identity: Identity | None, job_uid: str | None) -> None:
    """SIGKILL a replica: its shim, its group, and every marked process below it (torchrun's workers live
    in sessions of their own, out of reach of a group signal)."""
    kill_trees([identity], job_uid)


def kill_trees(identities: list[Identity | None], job_uid: str | None) -> None:
    """``kill_tree`` for several replicas at once, as a group restart stops every survivor: what lies below
    their shims is found in one look at the process table (one look per replica costs a group of 32 a
    table of ~100 processes read 31 times), and every group is signalled before any process below is proven
    and killed, so that all of them stop within milliseconds of each other. Each leader is proven once, just
    before: proving each again as its group is signalled (``signal_group``) took 0.16 s for 31, on cores busy
    with the groups already dying."""
    proven = [(identity, replica(identity, job_uid)) for identity in identities if identity is not None]
    below = _descendants({leader.pid for _, leader in proven if leader is not None})
    for identity, leader in proven:
        if leader is None:
            signal_group(identity, job_uid, signal.SIGKILL)  # only its members that carry the marker
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(identity.pid, signal.SIGKILL)  # a live proven leader's group id cannot be reused
    for process in below:  # psutil.Process.kill checks that the pid still names the process found
        if carries_marker(process, job_uid):
            with contextlib.suppress(psutil.Error):
                process.kill()


def _descendants(roots: set[int]) -> list[psutil.Process]:
    """Every live process below the processes ``roots``, from one pass over the process table."""
    if not roots:
        return []
    children: dict[int, list[psutil.Process]] = {}
    for process in psutil.process_iter(["ppid"]):
        children.setdefault(process.info["ppid"], []).append(process)
    found, parents = [], list(roots)
    while parents:
        below = children.get(parents.pop(), [])
        found += below
        parents += [process.pid for process in below]
    return found


def marked(job_uid: str | None) -> list[psutil.Process]:
    """Every live process (but this one) that carries the job's marker."""
    if not job_uid:
        return []
    me = os.getpid()
    found = []
    for process in psutil.process_iter():
        if process.pid != me and carries_marker(process, job_uid):
            found.append(process)
    return found


def kill_marked(job_uid: str | None) -> int:
    """SIGKILL every leftover process of the job (a replica's shim may be gone, its children not).
    Returns how many were killed."""
    killed = 0
    for process in marked(job_uid):
        with contextlib.suppress(psutil.Error):
            process.kill()
            killed += 1
    return killed


def spawn(
    argv: list[str], env: dict[str, str], cwd: str, log: IO[bytes], job_uid: str
) -> tuple[subprocess.Popen[bytes], Identity]:
    """Start ``argv`` as the leader of a new process group, marked as the job's, its output in ``log``.
    Raises OSError when it cannot be started."""
    popen = subprocess.Popen(
        argv,
        env={**os.environ, **env, MARKER_ENV: job_uid},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    # Until we reap it, the child's pid cannot be reused, so its start time read now is its own.
    return popen, identify(popen.pid) or Identity(popen.pid, 0.0)


# -- controllers ------------------------------------------------------------------------------------------


class ControllerLock:
    """The exclusive lock a job's controller holds on ``controller.lock`` for as long as it lives.

    The kernel drops it when the process ends, however it ends, so "is the lock held" answers "does a
    controller of this job live" without trusting any pid.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, patience: float = 2.0) -> bool:
        """Take the lock; False when another controller of the job holds it. A reader's probe holds a
        shared lock for microseconds, so a busy lock is tried again for ``patience`` seconds."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + patience
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.01)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def controller_lock_held(path: Path) -> bool:
    """Whether a live controller holds the job's lock (shared probe: readers never block each other)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def controller(identity: Identity | None, lock_path: Path) -> psutil.Process | None:
    """The job's controller process, if the recorded one still runs and holds the job's lock."""
    process = find(identity)
    return process if process is not None and controller_lock_held(lock_path) else None
