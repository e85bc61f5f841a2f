"""Runs one replica's command and makes sure it cannot outlive torchjob.

Started by the local backend as the leader of a new process group, it:
- asks the kernel to send it SIGTERM when its parent (the torchjob controller) dies (PR_SET_PDEATHSIG);
- runs the replica's command as its child, in the same process group;
- adopts every orphan of that command (PR_SET_CHILD_SUBREAPER): torchrun starts its workers in sessions of
  their own, so a process-group signal does not reach them, and a killed agent would leave them running;
- once the command has ended, kills whatever it left behind, in its group or below it in the process tree;
- takes a command killed (or failing) as ended once the kernel has begun to end it (``dying``): a process of a
  few GB SIGKILLed is torn down for 0.1-0.4 s before it can be reaped, its sockets still open, and its peers
  waiting on them meanwhile would wait for nothing (the controller hears of the failure once the shim exits);
- when the controller is gone, passes SIGTERM to the whole group, then SIGKILL after the grace period;
- writes how the command ended (exit code or signal, and when) to a status file, atomically.

It runs as a plain file (``python shim.py``), importing nothing of torchjob, so it starts in milliseconds.
Usage: ``shim.py STATUS_FILE GRACE_SECONDS PARENT_PID -- COMMAND [ARG...]``
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable

from torchjob import parent_death

PR_SET_CHILD_SUBREAPER = 36
PF_EXITING = 0x4  # a task's flag (/proc/PID/stat, field 9): the kernel is ending it, past any return to user space
# How often the shim looks for its command being ended (seconds), where ending it takes the kernel a while (its
# resident memory at least LARGE_RSS bytes: ~0.1 s a GB here), and where it does not (the reap comes first). A
# look costs ~0.1 ms of a core.
DYING_POLL, IDLE_POLL, LARGE_RSS = 0.05, 1.0, 512 << 20
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclasses.dataclass(frozen=True)
class ExitRecord:
    """How a replica's command ended: the status file the shim writes and the local backend reads."""

    finished_at: float
    exit_code: int | None = None
    signal: int | None = None  # the signal that ended it, if one did (then exit_code is None)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"finishedAt": self.finished_at}
        if self.signal is not None:
            data["signal"] = self.signal
        else:
            data["exitCode"] = self.exit_code if self.exit_code is not None else 0
        return data

    @classmethod
    def read(cls, path: str) -> ExitRecord | None:
        """The record at ``path``; None while there is none (the command runs, or the shim was killed)."""
        try:
            with open(path) as f:
                data = json.load(f)
            sig = data.get("signal")
            return cls(
                finished_at=float(data["finishedAt"]),
                exit_code=None if sig is not None else int(data.get("exitCode", 0)),
                signal=None if sig is None else int(sig),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def write(self, path: str) -> None:
        _write_json(path, self.to_json())


def main() -> int:
    status_file, grace, parent = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    command = sys.argv[sys.argv.index("--") + 1 :]

    def run_command() -> None:
        try:
            os.execvp(command[0], command)
        except OSError as err:
            print(f"torchjob: cannot run {command[0]!r}: {err.strerror}", file=sys.stderr, flush=True)
            os._exit(127)

    return supervise(status_file, grace, parent, run_command)


def supervise(status_file: str, grace: float, parent: int, run_child: Callable[[], None]) -> int:
    """Run ``run_child`` in a child process (it must not return: it execs, or exits), wait for it, record how
    it ended, and leave nothing below. ``parent`` is the process whose death ends the replica: the controller
    (cold start), or the job's warm interpreter, itself bound to the controller (warm start, warm_interpreter.py)."""
    # Not on Linux there is no prctl: the controller's own cleanup still applies.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    if not parent_death.die_with_parent(parent, signal.SIGTERM):
        return 1  # the controller died before we could watch it

    forwarded = False

    def on_term(signum: int, _frame: object) -> None:
        # A SIGTERM sent to the group by the controller reached the child already. Only when the
        # controller itself is gone must the shim pass it on (once), and enforce the grace period.
        nonlocal forwarded
        if os.getppid() == parent or forwarded:
            return
        forwarded = True
        _signal_group(signal.SIGTERM)
        signal.signal(signal.SIGALRM, lambda *_: _kill_everything_below())
        signal.setitimer(signal.ITIMER_REAL, max(grace, 0.01))

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    # Until the child has its own handlers, a stop signal must wait: run by the shim's handler inherited in the
    # child, it would make the child act as a shim whose parent died, and kill the real shim.
    stops = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        run_child()
        os._exit(0)  # run_child must exec or exit; never fall back into the shim's loop
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)

    _write_json(status_file + ".pid", {"pid": pid})
    wait_status = _ended(pid)
    if os.WIFSIGNALED(wait_status):
        ended = ExitRecord(time.time(), signal=os.WTERMSIG(wait_status))
        code = 128 + os.WTERMSIG(wait_status)
    else:
        ended = ExitRecord(time.time(), exit_code=os.WEXITSTATUS(wait_status))
        code = os.WEXITSTATUS(wait_status)
    ended.write(status_file)
    # Leave nothing behind: a command's own children, in its group or in sessions of their own.
    _kill_everything_below()
    return code


def _ended(pid: int) -> int:
    """``pid``'s wait status, once it is reaped or once it is ``dying`` of a failure; then it is left to whoever
    adopts it (this shim exits: the nearest subreaper above, or init, reaps it once the kernel is done)."""
    try:
        watch = os.pidfd_open(pid)
    except (OSError, AttributeError):
        watch = None  # no pidfd (an old kernel): wait for the reap alone
    try:
        while True:
            reaped, wait_status = os.waitpid(pid, os.WNOHANG if watch is not None else 0)
            if reaped:
                return wait_status
            failed, large = dying(pid)
            if failed:
                time.sleep(0.001)  # the status is set just after the flag: read twice, a moment apart
                if dying(pid)[0] == failed:
                    return failed
            assert watch is not None
            select.select([watch], [], [], DYING_POLL if large else IDLE_POLL)  # readable once it can be reaped
    finally:
        if watch is not None:
            os.close(watch)


def dying(pid: int) -> tuple[int, bool]:
    """The wait status ``pid`` is ending with, where the kernel is ending it (PF_EXITING: SIGKILLed, or its last
    thread gone) with a failure (a signal or a nonzero code), else 0 (alive, gone, or ending with 0: left to the
    reap, as a status not yet set reads 0 too); and whether its resident memory is large (``LARGE_RSS``). The
    status is the task's exit_code (field 52 of /proc/PID/stat, shown to its parent), set as the kernel begins
    to end it, before its memory is freed; a multi-threaded process's first thread is a zombie by then, not yet
    reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        flags, rss, status = int(fields[6]), int(fields[21]), int(fields[49])
    except (OSError, IndexError, ValueError):
        return 0, False
    return (status if flags & PF_EXITING else 0), rss * _PAGE >= LARGE_RSS


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` in the process tree, read from /proc (empty where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # The command name may hold spaces and parentheses; the fields after the last ')' do not.
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _kill_everything_below() -> None:
    _signal_group(signal.SIGKILL, spare_self=True)
    for pid in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _signal_group(signum: int, spare_self: bool = False) -> None:
    if spare_self:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # SIGKILL cannot be ignored, so kill the others one by one.
        me = os.getpid()
        group = os.getpgid(0)
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
            if entry.isdigit() and int(entry) != me:
                try:
                    if os.getpgid(int(entry)) == group:
                        os.kill(int(entry), signum)
                except (ProcessLookupError, PermissionError):
                    pass
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(0, signum)


def _write_json(path: str, data: dict[str, object]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
