"""The controller's side of a job's warm interpreter (warm_interpreter.py): start it, ask it for replicas, end it.

Started on the job's first warm start and kept for the job's life, so every restart forks from an interpreter
that has torch imported already. Where the first replica's script is shown not to need ``torch._dynamo``
(preload_scan.py), the first replicas are forked before that import, and ``settle`` has it imported after.

Anything wrong with it (it died, it answers nonsense, it does not answer) makes it *broken*: it is ended and
every later replica of the job starts cold, as if warm starts were off; a job never fails because of its warm
interpreter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from torchjob import worker_files
from torchjob.api import extensions
from torchjob.api.types import PyTorchJob
from torchjob.backends.local import processes
from torchjob.backends.local.processes import Identity
from torchjob.core.envs import ENV_THREADS
from torchjob.core.policies import warm_starts
from torchjob.launch import preload as preloading
from torchjob.launch import preload_scan, proctitle
from torchjob.launch.entry import WarmEntry

# What every warm interpreter imports: torch's modules and torchjob's own (launch/preload.py).
DEFAULT_PRELOAD = (*preloading.TORCH, *preloading.LIBRARY)
# Importing torch on a busy 2-core machine takes seconds; this only bounds a warm interpreter that hangs.
READY_SECONDS = 300.0
ANSWER_SECONDS = 30.0


def preload(job: PyTorchJob) -> list[str]:
    """The modules the job's warm interpreter imports: torch's, then those the job adds."""
    return preloading.with_extra(DEFAULT_PRELOAD, job.annotation(extensions.WARM_PRELOAD) or "")


def for_job(job: PyTorchJob, job_uid: str, log_path: Path) -> WarmInterpreter | None:
    """The job's warm interpreter (started on first use), or None when the job opts out of warm starts."""
    if not warm_starts.local_processes(job):
        return None
    return WarmInterpreter(job_uid, preload(job), log_path)


class WarmInterpreter:
    """One job's warm interpreter, as seen from its controller."""

    def __init__(self, job_uid: str, modules: list[str], log_path: Path) -> None:
        self.job_uid, self.modules, self.log_path = job_uid, modules, log_path
        self._popen: subprocess.Popen[bytes] | None = None
        self._channel: socket.socket | None = None
        self._pending = b""
        self._later: list[str] = []  # imported once the first replicas are forked (settle)
        self.broken = False

    def spawn(
        self,
        entry: WarmEntry,
        command: list[str],
        env: dict[str, str],
        cwd: str,
        log_path: Path,
        status_path: str,
        grace: float,
    ) -> Identity | None:
        """Start a replica from the warm interpreter; its shim's identity, or None when the interpreter is
        broken (the caller starts the replica cold)."""
        if self.broken:
            return None
        try:
            if self._channel is None:
                self._start(preload_scan.can_start_before_deferred(entry, cwd))
            request: dict[str, Any] = {
                "entry": dataclasses.asdict(entry),
                "command": command,
                "env": {**os.environ, **env, processes.MARKER_ENV: self.job_uid},
                "cwd": cwd,
                "log_path": str(log_path),
                "status_path": status_path,
                "grace": grace,
            }
            assert self._channel is not None
            self._channel.sendall(json.dumps(request).encode() + b"\n")
            answer = self._read(ANSWER_SECONDS)
            pid = int(answer["pid"])
        except (OSError, ValueError, KeyError, TypeError, TimeoutError) as err:
            self._break(f"torchjob: the warm interpreter failed ({err}); replicas start cold from now on\n")
            return None
        return processes.identify(pid) or Identity(pid, 0.0)

    def settle(self) -> None:
        """The replicas asked for so far are forked: the interpreter imports what it deferred (no answer)."""
        if self._later and self._channel is not None and not self.broken:
            self._later = []
            try:
                self._channel.sendall(b'{"preload_later": true}\n')
            except OSError as err:
                self._break(f"torchjob: the warm interpreter failed ({err}); replicas start cold from now on\n")

    def close(self) -> None:
        """End the warm interpreter (a replica it started and that still runs is ended by its own shim)."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._popen is not None:
            with contextlib.suppress(OSError):
                self._popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(5.0)
            self._popen = None

    def _start(self, defer: bool) -> None:
        first, self._later = preloading.staged(self.modules, defer)
        ours, theirs = socket.socketpair()
        env = {**os.environ, processes.MARKER_ENV: self.job_uid, ENV_THREADS: "1"}
        # Only the replicas report (torchjob/autoreport.py): the warm interpreter must start no thread.
        env.pop(worker_files.ENV_AUTOREPORT, None)
        # torch.cuda.is_available() without initialising CUDA, which a fork could not use afterwards.
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        argv = [
            sys.executable,
            "-m",
            "torchjob.backends.local.warm_interpreter",
            str(theirs.fileno()),
            str(os.getpid()),
            json.dumps({"first": first, "later": self._later}),
            proctitle.reservation(),
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._popen = subprocess.Popen(
                argv,
                env=env,
                cwd="/",  # nothing from a working directory can shadow what it preloads
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=[theirs.fileno()],
                start_new_session=True,
            )
        theirs.close()
        self._channel = ours
        self._read(READY_SECONDS)  # the preload is done (a module that failed is imported by the script itself)

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self._channel is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer in {timeout:.0f}s")
            readable, _, _ = select.select([self._channel], [], [], left)
            if readable:
                chunk = self._channel.recv(1 << 16)
                if not chunk:
                    raise OSError("it exited")
                self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise OSError(str(answer["error"]))
        return answer

    def _break(self, why: str) -> None:
        self.broken = True
        with contextlib.suppress(OSError), open(self.log_path, "a") as log:
            log.write(why)
        self.close()
