"""The job's warm interpreter: imports torch once, then forks every replica process of the job from itself.

A cold replica spends seconds importing torch and what DDP's constructor pulls in (``torch._dynamo``), on every
rank and on every restart. The local controller starts one of these per job (warm_client.py) and asks it, over a
socket pair only the two of them hold, to start each replica. For each request it forks a process that does
what ``shim.py`` does for a cold start (a session and process group of its own, the log as stdout and stderr,
bound to its parent's life, the exit record, nothing left below it), whose child then runs the script as
``__main__`` with the replica's argv, environment and working directory (warm_start.py): the same process tree,
signals and files as a cold start, without the imports.

Fork safety: the interpreter only imports (no CUDA, no OpenMP pool, no threads of its own: torch leaves one
idle native thread, and torch itself is forked after import by every DataLoader). It dies with the controller
(PR_SET_PDEATHSIG) and when the socket closes; its forked shims then stop their replicas (shim.py).

Its preload comes in two parts (``{"first": [...], "later": [...]}``): what it imports before it says it is
ready, and what it imports once the controller says that the first replicas are forked (preload_scan.py: a
script shown not to need ``torch._dynamo`` starts before it is imported; restarts find it imported).

Usage: ``python -m torchjob.backends.local.warm_interpreter FD CONTROLLER_PID PRELOAD_JSON RESERVED``
(warm_client.py builds it).
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
import traceback
from typing import Any

from torchjob import parent_death
from torchjob.backends.local import shim
from torchjob.backends.local.shim import ExitRecord
from torchjob.launch import preload, proctitle, reaping, warm_start

# How often finished shims are reaped while no request comes.
REAP_SECONDS = 0.2


class BecomeReplica(BaseException):
    """Raised in a forked replica process to unwind to ``main``, which runs the script at the top of the stack
    (clean tracebacks, normal interpreter shutdown). A BaseException, so nothing on the way catches it."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__()
        self.request = request


def main() -> None:
    fd, controller, plan = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    if not parent_death.die_with_parent(controller):
        sys.exit(1)  # the controller died before we could watch it
    proctitle.set_command_line([sys.executable, "-m", __spec__.name if __spec__ else "zygote", "(warm interpreter)"])
    base_path = list(sys.path[1:])  # without this process's own sys.path[0] (its working directory)
    failed = preload.preload(plan["first"])
    _send(fd, {"ready": True, "failed": failed})
    try:
        _serve(fd, plan["later"])
        return
    except BecomeReplica as replica:
        request = replica.request
    # Out of the except clause: the script's own exceptions must not be chained to BecomeReplica ("During
    # handling of the above exception...") in its traceback.
    warm_start.run(request, base_path)  # raises SystemExit, as a script's end does


def _serve(channel: int, later: list[str]) -> None:
    # A bare file descriptor, owned by no Python object: a forked replica closes it, and nothing in it can
    # close the number again later (when the number may name one of the script's files).
    pending = b""
    while True:
        reaping.reap_finished()  # the controller reads how each shim ended from its exit record
        ready, _, _ = select.select([channel], [], [], REAP_SECONDS)
        if not ready:
            continue
        chunk = os.read(channel, 1 << 16)
        if not chunk:
            return  # the controller is gone
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            if "preload_later" in request:  # the first replicas are forked: no answer is awaited
                preload.preload(later)  # a module that fails here is imported by the script itself
                later = []
            else:
                _send(channel, _fork_replica(request, channel))


def _fork_replica(request: dict[str, Any], channel: int) -> dict[str, Any]:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as err:
        return {"error": f"fork: {err.strerror}"}
    if pid:
        return {"pid": pid}
    try:
        os.close(channel)
        _become_shim(request)
    except Exception:  # noqa: BLE001 - a broken request ends this process, never the warm interpreter
        traceback.print_exc()
    os._exit(70)


def _become_shim(request: dict[str, Any]) -> None:
    """In the forked process: become the replica's shim (as ``python shim.py`` would be), in its session,
    writing to its log; its child becomes the replica."""
    os.setsid()
    log = os.open(request["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    status_path, grace, command = request["status_path"], request["grace"], request["command"]
    zygote = os.getppid()
    try:
        os.chdir(request["cwd"])
    except OSError as err:
        print(f"torchjob: cannot start {command[0]!r} in {request['cwd']}: {err.strerror}", file=sys.stderr)
        ExitRecord(time.time(), exit_code=127).write(status_path)
        os._exit(127)
    proctitle.set_command_line([sys.executable, shim.__file__, status_path, str(grace), str(zygote), "--", *command])

    def become_replica() -> None:
        raise BecomeReplica(request)

    os._exit(shim.supervise(status_path, float(grace), zygote, become_replica))


def _send(channel: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode() + b"\n"
    while data:
        data = data[os.write(channel, data) :]


if __name__ == "__main__":
    main()
