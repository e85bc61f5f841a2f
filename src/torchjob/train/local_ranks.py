"""A replica of several processes (``nprocPerNode: k``) whose script runs directly, not under torchrun.

torchrun starts a node's k workers itself. A replica that runs ``python train.py`` (an in-place group, whose
script forms the group at the store torchjob hosts, and any job that leaves torchrun out) has one process, so
``torchjob.train.init`` starts the other k - 1 by fork, once the script's imports are done: they are as warm
as the first (a spare's k processes all wait warm for a place), and run the rest of the script as local ranks
1..k-1. Each process then says where it stands the way torchrun would: ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and
``RANK`` (the replica's rank times k, plus the local rank).

The replica lives and dies as one, as a Pod does: the first process watches the others, and when one of them
fails it ends the rest and fails with the same code (a killed one's is named in the replica's error file); when
the first fails it gives its watchers a moment first, so a replica whose process was killed ends as that process
and not as the lost-peer error its first raised meanwhile; when the first dies, the kernel ends the others
(``PR_SET_PDEATHSIG``). The first process ends last: it waits for the others at its exit. All of them stay
in the first one's process group, so whoever stops the replica stops them all.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import sys
import threading
import time
from types import TracebackType

from torchjob import autoreport, forked, parent_death, worker_files
from torchjob.signal_names import signal_name

# How long a failing first process waits for its watchers to see another process of the replica that ended: the
# kernel closes a killed process's sockets a moment before it can be reaped.
_ECHO_GRACE_SECONDS = 0.5


def processes_per_replica() -> int:
    """How many processes this replica has (``TORCHJOB_REPLICA_PROCESSES``, set by the controller; 1 if unset)."""
    raw = os.environ.get(worker_files.ENV_REPLICA_PROCESSES, "1")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def local_rank() -> int:
    """This process's place in its replica (0: the first)."""
    raw = os.environ.get("LOCAL_RANK", "0")
    return int(raw) if raw.isdigit() else 0


def speaks_for_replica() -> bool:
    """Whether this process speaks to the controller for its replica: a replica of several processes speaks
    through its first, so the controller hears one member (or one spare), as it sees one Pod; the others only
    read the membership."""
    return local_rank() == 0


def global_rank(replica_rank: int, local: int, per_replica: int) -> int:
    """The rank of local rank ``local`` of the replica at ``replica_rank``: a replica's ranks are adjacent."""
    return replica_rank * per_replica + local


def place_in(members: list[str], replica: str) -> tuple[int, int]:
    """This process's rank, and the world size, in a group of ``members`` (replicas, in rank order) where it is
    a process of ``replica``."""
    per_replica = processes_per_replica()
    return global_rank(members.index(replica), local_rank(), per_replica), len(members) * per_replica


class Supervisor:
    """In the replica's first process: the others, watched from a thread each."""

    def __init__(self) -> None:
        self.children: dict[int, int] = {}  # pid -> local rank
        self.codes: dict[int, int] = {}
        self.ending = False  # this process ends them itself: their codes say nothing more
        self.failed = False  # this process had an uncaught exception (its exit code is not known at exit)
        self._threads: list[threading.Thread] = []

    def watch(self, pid: int, local_rank: int) -> None:
        self.children[pid] = local_rank
        thread = threading.Thread(target=self._wait, args=(pid,), name=f"torchjob-local-rank-{local_rank}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _wait(self, pid: int) -> None:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code  # a signal, as a shell says it
        self.codes[pid] = code
        if code != 0 and not self.ending:
            replica = os.environ.get(worker_files.ENV_REPLICA) or os.environ.get(worker_files.ENV_SPARE, "")
            who = f"local rank {self.children[pid]} of {replica}"
            print(
                f"torchjob: {who} ended with code {code}; its replica's other processes end with it",
                file=sys.stderr,
                flush=True,
            )
            if code > 128:
                # Killed: it wrote no error of its own, and the first process's (its peers lost, if it raised
                # one meanwhile) would name the echo, not the cause.
                _record_error(f"{who} was killed by {signal_name(code - 128)}")
            self.end_all(signal.SIGKILL)
            os._exit(code)

    def wait_briefly_for_ended(self, seconds: float) -> None:
        """Give the watchers ``seconds`` to see a process that already ended: the first process's own failure
        may be the echo of it (its peer's connection reset as the kernel tore the killed one down), and the
        replica should end with the killed one's code. A watcher that sees a failure ends the process itself."""
        deadline = time.monotonic() + seconds
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def end_all(self, signum: int) -> None:
        self.ending = True
        for pid in self.children:
            if pid not in self.codes:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)

    def wait_all(self) -> int:
        """Wait for every other process of the replica; the first non-zero code among them (0 if none)."""
        for thread in self._threads:
            thread.join()
        return next((code for code in self.codes.values() if code != 0), 0)


SUPERVISOR: Supervisor | None = None


def start() -> None:
    """Start this replica's other processes, where it has several and nothing started them (see the module's
    docstring); a no-op otherwise: one process per replica, a torchrun worker, a process started here."""
    global SUPERVISOR
    per_replica = processes_per_replica()
    if per_replica == 1 or "LOCAL_RANK" in os.environ or SUPERVISOR is not None:
        return
    if not os.environ.get(worker_files.ENV_REPLICA) and not os.environ.get(worker_files.ENV_SPARE):
        return  # not a replica torchjob started
    sys.stdout.flush()
    sys.stderr.flush()
    supervisor = Supervisor()
    parent = os.getpid()
    for local_rank in range(1, per_replica):
        pid = os.fork()
        if pid == 0:
            _become(local_rank, per_replica, parent)
            return
        supervisor.watch(pid, local_rank)
    SUPERVISOR = supervisor
    _become(0, per_replica, parent)
    previous = sys.excepthook

    def note_failure(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        supervisor.failed = True  # run for a cold interpreter's uncaught exception, and for a warm start's
        previous(kind, value, tb)

    sys.excepthook = note_failure
    atexit.register(_at_exit)


def _become(local_rank: int, per_replica: int, parent: int) -> None:
    if local_rank > 0 and not parent_death.die_with_parent(parent):  # the first process died first
        os._exit(128 + signal.SIGKILL)
    os.environ["LOCAL_RANK"] = str(local_rank)
    os.environ["LOCAL_WORLD_SIZE"] = str(per_replica)
    rank = os.environ.get("RANK")
    if rank is not None and rank.isdigit():  # a spare has no rank until it is given a place
        os.environ["RANK"] = str(global_rank(int(rank), local_rank, per_replica))
    if local_rank > 0:
        forked.settle_threads()  # before any thread of its own starts
        autoreport.restart_in_child()


def finish(exit_code: int) -> int:
    """In the replica's first process, at its end: wait for the others, and the code the replica ends with (the
    first failure among them, else ``exit_code``). Any other process: ``exit_code``."""
    if SUPERVISOR is None:
        return exit_code
    if exit_code != 0:
        SUPERVISOR.wait_briefly_for_ended(_ECHO_GRACE_SECONDS)
        SUPERVISOR.end_all(signal.SIGKILL)
        return exit_code
    return SUPERVISOR.wait_all()


def _at_exit() -> None:
    """The first process's interpreter exits: after an uncaught exception the others go at once (they would wait
    on it in a collective); otherwise it waits for them, and fails if one of them did. (The exit code itself is
    not known here: a script that ends by ``sys.exit(1)`` in its first process, without ``shutdown``, waits for
    the others too.)"""
    failed = SUPERVISOR is not None and SUPERVISOR.failed
    code = finish(1 if failed else 0)
    if code != 0 and not failed:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _record_error(message: str) -> None:
    """Write ``message`` as the replica's error (torchelastic's error file, which the controller reads)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    record = {"message": {"message": message, "extraInfo": {"timestamp": str(int(time.time()))}}}
    with contextlib.suppress(OSError), open(path, "w") as f:
        json.dump(record, f)
