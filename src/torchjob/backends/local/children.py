"""The processes one local controller started, while it runs: started under the shim, waited on, reaped.

Each runs under ``shim.py`` as the leader of a process group of its own, its output appended to a log file.
How one ended comes from the shim's exit record (or, when the shim itself was killed, from the shim's own
exit). Waiting selects on a pidfd per child, so the controller wakes the moment any of them exits. Every
signal goes through ``processes``, which proves a process is the job's before it is touched.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from torchjob.backends.local import processes, shim
from torchjob.backends.local.processes import Identity
from torchjob.backends.local.shim import ExitRecord
from torchjob.backends.local.store import ProcessRecord
from torchjob.backends.local.warm_client import WarmInterpreter
from torchjob.backends.local.warm_command import warm_entry
from torchjob.launch.entry import WarmEntry


class Children:
    def __init__(self, job_uid: str, grace: float, warm: WarmInterpreter | None = None) -> None:
        self.job_uid = job_uid
        self.grace = grace
        self.warm = warm
        self._popens: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        # Started from the warm interpreter: not our children, watched through their identity.
        self._forked: dict[tuple[str, int], Identity] = {}
        self._pidfds: dict[int, int] = {}

    def spawn(
        self,
        name: str,
        attempt: int,
        log_path: Path,
        command: list[str],
        env: dict[str, str],
        cwd: str,
        role: str,
        may_start_warm: bool = True,
    ) -> ProcessRecord:
        """Start ``command`` under the shim, its output in ``log_path``; the record to keep of it. It starts from
        the job's warm interpreter when it can (warm_command.py). A command that cannot start is recorded as
        having exited with 127, so the planner reports it like any failure."""
        status_path = str(log_path.with_suffix(".exit.json"))
        identity = None
        note = None  # why a job with warm starts starts this one cold, said once in its log
        if self.warm is not None and may_start_warm:
            start = warm_entry(command, env, cwd, sys.executable, dict(os.environ))
            if isinstance(start, WarmEntry):
                identity = self.warm.spawn(start, command, env, cwd, log_path, status_path, self.grace)
                if identity is not None:
                    self._forked[(name, attempt)] = identity
            elif attempt == 0:
                note = f"torchjob: starting cold: {start.reason}\n"
        if identity is None:
            identity = self._spawn_cold((name, attempt), log_path, status_path, command, env, cwd, note)
        return ProcessRecord(
            replica=name,
            attempt=attempt,
            pid=identity.pid if identity else 0,
            log_path=str(log_path),
            status_path=status_path,
            started_at=time.time(),
            process_started=identity.started if identity else None,
            role=role,
        )

    def _spawn_cold(
        self,
        key: tuple[str, int],
        log_path: Path,
        status_path: str,
        command: list[str],
        env: dict[str, str],
        cwd: str,
        note: str | None,
    ) -> Identity | None:
        argv = [sys.executable, shim.__file__, status_path, str(self.grace), str(os.getpid()), "--", *command]
        with open(log_path, "ab") as log:
            if note:
                log.write(note.encode())
            try:
                popen, identity = processes.spawn(argv, env, cwd, log, self.job_uid)
            except OSError as err:
                log.write(f"torchjob: cannot start {command[0]!r} in {cwd}: {err.strerror}\n".encode())
                ExitRecord(time.time(), exit_code=127).write(status_path)
                return None
        self._popens[key] = popen
        return identity

    def exit_status(self, record: ProcessRecord) -> ExitRecord | None:
        """How the process ended, or None while it runs (also for one an earlier controller started)."""
        popen = self._popens.get((record.replica, record.attempt))
        forked = (record.replica, record.attempt) in self._forked
        if popen is not None and popen.poll() is None:
            return None
        if popen is None and processes.replica(record.identity, self.job_uid) is not None:
            return None
        self._forget(record)
        ended = ExitRecord.read(record.status_path)
        if ended is not None:
            return ended
        # The shim itself was killed before it could write: its own fate is the replica's. A warm-started
        # shim handles SIGTERM, so only SIGKILL ends it without a record.
        if forked:
            return ExitRecord(time.time(), signal=signal.SIGKILL)
        code = popen.returncode if popen is not None else None
        if code is not None and code < 0:
            return ExitRecord(time.time(), signal=-code)
        return ExitRecord(time.time(), exit_code=137 if code is None else code)

    def wait(self, timeout: float, wake_fd: int | None) -> None:
        """Block until a child exits, ``wake_fd`` is readable, or ``timeout`` seconds pass."""
        selector = selectors.DefaultSelector()
        try:
            if wake_fd is not None:
                selector.register(wake_fd, selectors.EVENT_READ)
            pids = [p.pid for p in self._popens.values() if p.returncode is None]
            for pid in [*pids, *(identity.pid for identity in self._forked.values())]:
                fd = self._pidfd(pid)
                if fd is not None:
                    selector.register(fd, selectors.EVENT_READ)
            if selector.get_map():
                selector.select(timeout)
            else:
                time.sleep(timeout)
        finally:
            selector.close()
        if wake_fd is not None:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_fd, 4096)

    def rename(self, record: ProcessRecord, name: str) -> None:
        """Track ``record``'s process under a new name (a spare that became a replica)."""
        popen = self._popens.pop((record.replica, record.attempt), None)
        if popen is not None:
            self._popens[(name, record.attempt)] = popen
        forked = self._forked.pop((record.replica, record.attempt), None)
        if forked is not None:
            self._forked[(name, record.attempt)] = forked

    def stop_all(self, live: list[ProcessRecord], grace: float) -> None:
        """SIGTERM every process group in ``live``, SIGKILL what is left after ``grace``, and reap them all."""
        for record in live:
            processes.signal_group(record.identity, self.job_uid, signal.SIGTERM)
        deadline = time.time() + grace
        while time.time() < deadline and any(self.exit_status(r) is None for r in live):
            time.sleep(0.05)
        processes.kill_trees([r.identity for r in live if self.exit_status(r) is None], self.job_uid)
        for record in live:
            self.reap(record, timeout=5.0)

    def reap(self, record: ProcessRecord, timeout: float) -> None:
        popen = self._popens.get((record.replica, record.attempt))
        if popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout)
        elif (record.replica, record.attempt) in self._forked:
            # Not ours to wait for (the warm interpreter reaps it): watch it go.
            deadline = time.monotonic() + timeout
            while processes.find(record.identity) is not None and time.monotonic() < deadline:
                time.sleep(0.02)

    def settle(self) -> None:
        """What was asked is started: the warm interpreter, if the job has one, may import what it deferred."""
        if self.warm is not None:
            self.warm.settle()

    def close(self) -> None:
        """End the warm interpreter, if the job has one."""
        if self.warm is not None:
            self.warm.close()

    def _pidfd(self, pid: int) -> int | None:
        if pid not in self._pidfds:
            try:
                self._pidfds[pid] = os.pidfd_open(pid)
            except (OSError, AttributeError):
                return None
        return self._pidfds[pid]

    def _forget(self, record: ProcessRecord) -> None:
        self._popens.pop((record.replica, record.attempt), None)
        self._forked.pop((record.replica, record.attempt), None)
        fd = self._pidfds.pop(record.pid, None)
        if fd is not None:
            os.close(fd)
