"""The progress bar of ``torchjob run`` and ``torchjob submit --follow`` on a terminal: percent, step of total,
time left and loss, from the job's ``status.trainerStatus`` (what torchjob.train reports)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from torchjob.api.types import JobStatus, TrainerStatus
from torchjob.core import conditions


def progress_line(trainer: TrainerStatus | None) -> RenderableType | None:
    """The bar and its words, or None while the job reports no percentage."""
    if trainer is None or trainer.progress_percentage is None:
        return None
    metrics = {m.name: m.value for m in trainer.metrics}
    bar = ProgressBar(total=100, completed=trainer.progress_percentage, width=30)
    words = [f" {trainer.progress_percentage}%"]
    if "step" in metrics and "totalSteps" in metrics:
        words.append(f"step {metrics['step']}/{metrics['totalSteps']}")
    if trainer.estimated_remaining_seconds is not None:
        words.append(f"~{trainer.estimated_remaining_seconds}s left")
    if "loss" in metrics:
        words.append(f"loss {metrics['loss']}")
    line = Table.grid(padding=(0, 1))
    line.add_row(bar, Text(" · ".join(words)))
    return line


class FollowDisplay:
    """``submit --follow``: each replica's lines, prefixed, and on a terminal a live progress bar under them,
    refreshed from the job's status every ``poll`` seconds. Off a terminal, only the lines, as before."""

    def __init__(self, name: str, status: Callable[[], JobStatus], poll: float = 1.0) -> None:
        self.name = name
        self.console = Console(highlight=False, soft_wrap=True)
        self._status = status
        self._poll = poll
        self._stop = threading.Event()
        self._live: Live | None = None
        self._thread = threading.Thread(target=self._refresh, name="follow-status", daemon=True)

    def __enter__(self) -> FollowDisplay:
        if self.console.is_terminal:
            self._live = Live(Text(f"{self.name}: following"), console=self.console, transient=True)
            self._live.__enter__()
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._live is not None:
            self._thread.join()
            self._live.__exit__(kind, value, tb)

    def line(self, replica: str, text: str) -> None:
        if self._live is None:
            print(f"[{replica}] {text}", flush=True)
        else:
            self.console.print(Text(f"[{replica}] ", style="bold") + Text(text))

    def _refresh(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                status = self._status()
            except Exception as err:  # noqa: BLE001 - a missed refresh must never end the follow
                print(f"torchjob: could not read {self.name}'s status: {err}", file=sys.stderr)
                continue
            state = conditions.state(status) or "Created"
            summary = Text(f"{self.name}: {state} · attempt {status.attempt} · {status.restart_count} restarts")
            bar = progress_line(status.trainer_status)
            assert self._live is not None
            self._live.update(summary if bar is None else Group(bar, summary))
