"""What ``torchjob run`` shows while a job runs: every replica's output with a ``[worker-1]`` prefix, state
changes and events, and on a terminal a live table of the replicas at the bottom, under a progress bar
(step of total, time left, loss) once the script reports its progress (``status.trainerStatus``).
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from torchjob.api.types import PyTorchJob
from torchjob.backends.local.logs import LogFollower
from torchjob.cli.progress import progress_line
from torchjob.controller.loop import PassResult
from torchjob.core import conditions
from torchjob.core.actions import Event
from torchjob.core.replicas import expected_replicas
from torchjob.sdk.local_client import LocalClient

_COLORS = ("cyan", "magenta", "green", "yellow", "blue", "bright_red", "bright_cyan", "bright_magenta")


class RunDisplay:
    def __init__(self, client: LocalClient, job: PyTorchJob, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.job = job
        self.started = time.monotonic()
        self._follower = LogFollower(client.store.job_dir(job.name) / "logs")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="log-follower", daemon=True)
        # Replica lines and torchjob's own lines are printed under one lock, replica output first, so that
        # even with both streams sent to one file (`torchjob run > log 2>&1`) the order is what happened.
        self._lock = threading.Lock()
        self._colors: dict[str, str] = {}
        self._last_state = ""
        self._phases: dict[str, str] = {}
        self._live: Live | None = None

    # -- context --------------------------------------------------------------------------------------

    def __enter__(self) -> RunDisplay:
        if self.console.is_terminal:
            self._live = Live(self._panel(), console=self.console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        with self._lock:
            self._print_lines(final=True)
        if self._live is not None:
            self._live.__exit__(kind, value, tb)

    # -- callbacks from the controller ----------------------------------------------------------------

    def event(self, event: Event) -> None:
        style = "bold red" if event.type == "Warning" else "bold"
        with self._lock:
            self._print_lines(rescan=True)
            # A hang's message begins with its kind already ("Hung: ..."): said once.
            said = event.message if event.message.startswith(f"{event.reason}:") else f"{event.reason}: {event.message}"
            self.err.print(Text(f"torchjob: {said}", style=style))

    def update(self, result: PassResult) -> None:
        self.job = result.job
        self._phases = {
            str(o.replica): o.phase.value + (" (stopping)" if o.stopping else "")
            for o in result.observed
            if o.attempt == result.job.status.attempt
        }
        state = conditions.state(result.job.status)
        with self._lock:
            # The last pass: read every log now, before a TTL of 0 removes the job's folder.
            self._print_lines(rescan=result.done)
            if state != self._last_state and state in ("Running", "Restarting", "Suspended"):
                self.err.print(Text(f"torchjob: {result.job.name} is {state}", style="bold"))
        self._last_state = state
        if self._live is not None:
            self._live.update(self._panel())

    def summary(self, job: PyTorchJob | None, interrupted: str | None = None) -> str:
        seconds = time.monotonic() - self.started
        if interrupted:
            return f"torchjob: interrupted by {interrupted}; every replica of {self.job.name} was stopped"
        if job is None:
            return f"torchjob: {self.job.name} finished and was removed (ttlSecondsAfterFinished)"
        last = job.status.conditions[-1].message if job.status.conditions else ""
        attempts = job.status.attempt + 1
        return (
            f"torchjob: {last} ({attempts} attempt{'s' if attempts > 1 else ''}, "
            f"{job.status.restart_count} restarts, {seconds:.1f}s)"
        )

    # -- internals ------------------------------------------------------------------------------------

    def _follow(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                self._print_lines()

    def _print_lines(self, final: bool = False, rescan: bool = False) -> None:
        for replica, line in self._follower.poll(final=final, rescan=rescan):
            prefix = Text(f"[{replica}] ", style=self._color(replica.split("#")[0]))
            self.console.print(prefix + Text(line))

    def _color(self, replica: str) -> str:
        return self._colors.setdefault(replica, _COLORS[len(self._colors) % len(_COLORS)])

    def _panel(self) -> RenderableType:
        """The live bottom of the terminal: the progress bar (when the job reports one) over the table."""
        bar = progress_line(self.job.status.trainer_status)
        return self._table() if bar is None else Group(bar, self._table())

    def _table(self) -> Table:
        status = self.job.status
        elapsed = time.monotonic() - self.started
        title = (
            f"{self.job.name}: {conditions.state(status) or 'Created'} · attempt {status.attempt} · "
            f"{status.restart_count} restarts · {elapsed:.0f}s"
        )
        table = Table(title=title, title_justify="left", box=None, pad_edge=False)
        table.add_column("REPLICA")
        table.add_column("PHASE")
        for replica in expected_replicas(self.job):
            name = str(replica)
            table.add_row(Text(name, style=self._color(name)), self._phases.get(name, "Pending"))
        return table
