"""A Pod's launcher: the trainer container runs ``python -s -m torchjob.launch -- python SCRIPT ARGS...`` (the
operator writes it as ``python -s -c BOOT -- ...``, which runs this where the image has torchjob: warm_pods.py).

The operator starts it in place of the script when the job asks for warm restarts (``torchjob.io/warm-start:
"true"``, ``backends/kubernetes/warm_pods.py``). It imports torch once (preload.py), then forks the script from
itself: the script runs as ``__main__`` with its own argv, environment and command line (warm_start.py), as a cold
``python SCRIPT`` would. It tells the operator how its trainer is (orders.py): running in attempt A, or ended with
code C. When the group restarts, the operator answers with orders for the next attempt: first stop what is left
of the trainer, then, once no trainer of the old attempt is left in the group, start the next attempt: the launcher
forks the script again. The Pod, its address, its node, its image and its imports stay, so the restart costs
neither a Pod nor a container nor a torch import.

The container ends as the script would have: 0 when the script succeeds; the script's code (128+N for signal N)
when the Pod is deleted (its SIGTERM is passed on to the trainer, whose end is the container's) or when no order
comes within ``ORDER_WAIT_SECONDS`` of a failure (the job failed for good, or no operator answers). A command
that cannot start warm (``entry.py``), or a Pod with no operator to answer, runs as it is, cold (exec).

Single-threaded on purpose: a fork copies only the calling thread. Signals wake the loop through a pipe
(``signal.set_wakeup_fd``); as the container's first process it also reaps what the trainer leaves behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import site
import sys
import time
import traceback
from typing import Any, NoReturn

from torchjob import worker_files
from torchjob.launch import preload, preload_scan, reaping, warm_start
from torchjob.launch.entry import POD_COLD_START, ColdStart, WarmEntry, python_entry
from torchjob.launch.orders import TrainerChannel

# How often the operator hears from the launcher: while its trainer runs, and once it has failed (the order that
# restarts the group is awaited then; a survivor's trainer usually fails on its own within a second of its peer).
RUNNING_POLL_SECONDS = 0.5
ENDED_POLL_SECONDS = 0.1
ORDER_WAIT_SECONDS = 300.0
USAGE = "usage: python -s -m torchjob.launch -- python [-u] SCRIPT|-m MODULE [ARGS...]"


class BecomeTrainer(BaseException):
    """Raised in the forked process to unwind to ``main``, which runs the script at the top of the stack (as
    the local warm interpreter does: clean tracebacks, the interpreter's normal shutdown)."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__()
        self.request = request


def main(argv: list[str] | None = None) -> NoReturn:
    args = sys.argv[1:] if argv is None else argv
    command = args[args.index("--") + 1 :] if "--" in args else args
    if not command:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    entry = python_entry(command[1:])
    channel = TrainerChannel.from_env()
    if isinstance(entry, ColdStart) or channel is None:
        why = entry.reason if isinstance(entry, ColdStart) else "no operator gives this Pod restart orders"
        print(f"{POD_COLD_START}{why}", file=sys.stderr, flush=True)
        os.execvp(command[0], command)
    base_path = list(sys.path[1:])  # without this process's own sys.path[0] (its working directory)
    modules = preload.with_extra(preload.TORCH, os.environ.get(worker_files.ENV_WARM_PRELOAD, ""))
    # What the script is shown not to need at its start is imported after the first fork (preload_scan.py).
    first, later = preload.staged(modules, preload_scan.can_start_before_deferred(entry, os.getcwd()))
    preload.preload(first)
    try:
        Launcher(entry, command, channel).run(later)
    except BecomeTrainer as trainer:
        request = trainer.request
    # Out of the except clause: the script's own exceptions must not be chained to BecomeTrainer.
    warm_start.run(request, base_path)


class Launcher:
    def __init__(self, entry: WarmEntry, command: list[str], channel: TrainerChannel) -> None:
        self.entry, self.command, self.channel = entry, command, channel
        self.env = dict(os.environ)
        attempt = self.env.get(worker_files.ENV_ATTEMPT, "0")
        self.attempt = int(attempt) if attempt.isdigit() else 0
        self.stop_signal: int | None = None  # the Pod is being deleted: no restart any more
        self.exit_code: int | None = None  # the trainer's, once it ended
        self.ended_at = 0.0
        self._wake_read, self._wake_write = os.pipe()
        for fd in (self._wake_read, self._wake_write):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the signal wakes the loop
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        self.pid: int | None = self._fork()

    def run(self, later: list[str]) -> NoReturn:
        """Watch the trainer and obey the operator's orders, for the Pod's life; ``later``: what to import
        once the first trainer is forked, for the restarts."""
        preload.preload(later)
        while True:
            self._sleep(ENDED_POLL_SECONDS if self.exit_code is not None else RUNNING_POLL_SECONDS)
            ended = self._reap()
            if ended is not None:
                if ended == 0 or self.stop_signal is not None:
                    sys.exit(ended)
                self.exit_code, self.ended_at = ended, time.monotonic()
            if self.stop_signal is not None and self.pid is None:
                sys.exit(self.exit_code if self.exit_code is not None else 128 + self.stop_signal)
            order = self.channel.tell(self.attempt, self.exit_code)
            if order is not None and self.stop_signal is None:
                self._obey(order)
            elif self.exit_code is not None and time.monotonic() - self.ended_at > ORDER_WAIT_SECONDS:
                sys.exit(self.exit_code)

    def _obey(self, order: worker_files.RestartOrder) -> None:
        """Stop what is left of the trainer (within the order's grace); then, when the order says so, start its
        attempt."""
        if self.pid is not None:
            self._signal_trainer(signal.SIGTERM if order["grace"] > 0 else signal.SIGKILL)
            deadline = time.monotonic() + order["grace"]
            while (ended := self._reap()) is None:
                if time.monotonic() >= deadline:
                    self._signal_trainer(signal.SIGKILL)
                self._sleep(0.05)
            self.exit_code, self.ended_at = ended, time.monotonic()
        if not order["start"]:
            return  # told again at every poll until the start comes; the trainer is gone by then
        self.attempt, self.exit_code = order["attempt"], None
        self.env.update(order["env"])
        print(f"torchjob: attempt {self.attempt} starts in this Pod, warm", file=sys.stderr, flush=True)
        self.pid = self._fork()

    def _fork(self) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        try:
            os.setsid()  # a process group of its own: stopping the trainer stops what it started
            signal.set_wakeup_fd(-1)
            os.close(self._wake_read)
            os.close(self._wake_write)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            entry = dataclasses.asdict(self.entry)
            request = {"entry": entry, "env": self.env, "command": self.command, "user_site": _user_site(self.env)}
        except BaseException:  # noqa: BLE001 - never return into the launcher's loop from here
            traceback.print_exc()
            os._exit(70)
        raise BecomeTrainer(request)

    def _reap(self) -> int | None:
        """The trainer's exit code (128+N for signal N) once it ended; None while it runs. As the container's first
        process, also reaps the orphans it left."""
        ended = reaping.reap_finished()
        if self.pid is None or self.pid not in ended:
            return None
        code, self.pid = ended[self.pid], None
        return code

    def _on_stop(self, signum: int, _: Any) -> None:
        self.stop_signal = signum
        self._signal_trainer(signum)

    def _signal_trainer(self, signum: int) -> None:
        if self.pid is None:
            return
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:  # forked, but not yet in its own group
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def _sleep(self, seconds: float) -> None:
        select.select([self._wake_read], [], [], seconds)
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_read, 512)


def _user_site(env: dict[str, str]) -> str | None:
    """The user site folder a cold ``python`` would add (and whose ``.pth`` files it would run: the operator's
    progress reports among them); the launcher runs with ``-s`` so that they run in the trainer only."""
    if env.get("PYTHONNOUSERSITE"):
        return None
    folder = site.getusersitepackages()
    return folder if os.path.isdir(folder) else None
