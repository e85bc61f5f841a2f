"""Ranks of a test script forked from an interpreter that imported torch once (torchjob's warm start, for tests).

The worker-library tests start hundreds of short rank processes; each cold one spends 3-5 CPU-seconds importing
torch, more than most of these scripts then run. This process (``python -m tests.support.warm_ranks``) imports
what they import once, then forks one process per rank on request, which becomes ``python SCRIPT ARGS`` with the
rank's environment and working directory through torchjob's own warm start (``torchjob.launch.warm_start``: the
same ``sys.argv``, ``sys.path``, seeds, thread count, and a normal interpreter shutdown with atexit hooks and
non-daemon threads joined). The ranks are real processes running real ``torch.distributed``; only the imports
are shared. Tests about a process's own start (its C heap, its first imports) start their processes themselves.

Protocol, one JSON object a line: the test writes ``{"argv", "env", "cwd", "output"}`` to its stdin and reads
``{"pid"}``; every ended rank is told as ``{"exited": pid, "code": returncode}`` (negative: the signal), as
``Popen.returncode`` says it. It ends, and SIGKILLs the ranks it forked, when its stdin closes; its ranks die with
it (PR_SET_PDEATHSIG), and it dies with its test process.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from torchjob import parent_death
from torchjob.launch import preload

# What the local backend's warm interpreter imports for a job's replicas, and what the rank scripts import beyond
# it: DCP and FSDP2.
PRELOAD = (*preload.TORCH, *preload.LIBRARY, "torch.distributed.checkpoint", "torch.distributed.fsdp")
READY_SECONDS = 300.0


class _BecomeRank(BaseException):
    """Unwinds a forked child to ``main``, which runs the script at the top of the stack (see warm_interpreter)."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__()
        self.request = request


def main() -> None:
    from torchjob.launch import warm_start

    if not parent_death.die_with_parent(int(sys.argv[1])):
        sys.exit(1)  # the test process ended before this could watch it
    base_path = list(sys.path[1:])
    preload.preload(list(PRELOAD))
    requests, replies = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    _say(replies, {"ready": True})
    try:
        _serve(requests, replies)
        return
    except _BecomeRank as rank:
        request = rank.request
    os.chdir(request["cwd"])
    warm_start.run(
        {
            "entry": {"module": False, "target": request["argv"][0], "argv": request["argv"], "unbuffered": False},
            "env": request["env"],
            "command": [sys.executable, *request["argv"]],
        },
        base_path,
    )


def _serve(requests: int, replies: int) -> None:
    forked: set[int] = set()
    pending = b""
    try:
        while True:
            for pid, code in _reap(forked):
                _say(replies, {"exited": pid, "code": code})
            ready, _, _ = select.select([requests], [], [], 0.05)
            if not ready:
                continue
            chunk = os.read(requests, 65536)
            if not chunk:
                return  # the test process closed its end: end with it
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                interpreter, pid = os.getpid(), os.fork()
                if pid == 0:
                    forked.clear()  # the siblings are not the child's to end (the finally below)
                    _become(request, interpreter, requests, replies)
                forked.add(pid)
                _say(replies, {"pid": pid})
    finally:
        for pid in forked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _become(request: dict[str, Any], interpreter: int, *inherited: int) -> None:
    if not parent_death.die_with_parent(interpreter):
        os._exit(1)  # the interpreter ended first: nobody is left to tell this rank's exit to
    # Opened before the inherited descriptors close, so that neither takes the number of one (stdin's among them).
    out = os.open(request["output"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    for fd in inherited:
        if fd > 2:
            os.close(fd)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.close(null)
    raise _BecomeRank(request)


def _reap(forked: set[int]) -> list[tuple[int, int]]:
    ended = []
    while forked:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        forked.discard(pid)
        ended.append((pid, os.waitstatus_to_exitcode(status)))
    return ended


def _say(fd: int, message: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


class WarmRank:
    """A forked rank, as much of ``subprocess.Popen`` as the tests use: ``poll``, ``wait``, ``kill``, ``returncode``."""

    def __init__(self, parent: WarmRanks, pid: int, args: list[str]) -> None:
        self.parent, self.pid, self.args = parent, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.parent.read_exits(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.parent.read_exits(0.1)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class WarmRanks:
    """The test process's side: one warm interpreter, started on first use, for the test process's life."""

    def __init__(self) -> None:
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.warm_ranks", str(os.getpid())],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests: IO[bytes] = self.process.stdin
        self.replies = self.process.stdout.fileno()
        self.pending = b""
        self.ranks: dict[int, WarmRank] = {}
        if self._next(READY_SECONDS) != {"ready": True}:
            raise RuntimeError(f"the warm interpreter for test ranks did not start (exit {self.process.poll()})")

    def spawn(self, argv: list[str], env: dict[str, str], output: str) -> WarmRank:
        """Fork a rank that runs ``python *argv`` with ``env``, its output appended to the file ``output``."""
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), "output": output}
        self.requests.write((json.dumps(request) + "\n").encode())
        self.requests.flush()
        while True:
            message = self._next(60)
            if message is None:
                raise RuntimeError("the warm interpreter for test ranks did not fork a rank within 60s")
            if "pid" in message:
                rank = WarmRank(self, message["pid"], [sys.executable, *argv])
                self.ranks[rank.pid] = rank
                return rank
            self._exited(message)

    def read_exits(self, timeout: float) -> None:
        """Take in every exit the interpreter has told of, waiting up to ``timeout`` for the first."""
        while True:
            message = self._next(timeout)
            if message is None:
                return
            self._exited(message)
            timeout = 0

    def _exited(self, message: dict[str, Any]) -> None:
        rank = self.ranks.pop(message["exited"], None)
        if rank is not None:
            rank.returncode = message["code"]

    def _next(self, timeout: float) -> dict[str, Any] | None:
        """The interpreter's next message, or None when it says nothing for ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.replies], [], [], max(left, 0))
            if not ready:
                return None
            chunk = os.read(self.replies, 65536)
            if not chunk:
                raise RuntimeError(f"the warm interpreter for test ranks ended (exit {self.process.wait()})")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message


_SHARED: list[WarmRanks] = []


def shared() -> WarmRanks:
    """This test process's warm interpreter, started on first use (and again if it ended)."""
    if not _SHARED or _SHARED[0].process.poll() is not None:
        _SHARED[:] = [WarmRanks()]
    return _SHARED[0]


if __name__ == "__main__":
    main()
