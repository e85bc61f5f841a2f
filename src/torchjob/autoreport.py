"""Progress and liveness reports from the scripts people bring, which never import torchjob.

torchjob puts ``_boot/sitecustomize.py`` on every local replica's ``PYTHONPATH`` (unless the job says
``torchjob.io/auto-report: "false"``); Python runs it at start-up, and it calls ``start()``. In a Pod, the
operator mounts a user site folder whose ``.pth`` file does the same (``backends/kubernetes/autoreport_boot.py``),
and the beats go to the operator's report endpoint instead of a file (``torchjob.reporting``). That starts one
daemon thread, and nothing else happens until the script imports ``torch.optim``: then a global
optimizer-step hook counts steps (``register_optimizer_step_post_hook``), and from the first step on the thread
writes the process's heartbeat (``worker_files``) every second: the step, when it completed, and when the
process last beat. The thread beats while the main thread waits in a collective, so a frozen process is the
one that stops beating. It never prints, never changes what the script does, and costs a file write a
second. A script that trains with ``torchjob.train.MetricsLogger`` reports itself: the logger stands this
down (``stand_down``).

Torch-free on purpose (it runs in every Python process of a replica, torchrun's agent included): it imports
only the standard library, ``worker_files``, ``reporting``, ``sections`` and ``beats``.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchjob import beats, reporting, sections, worker_files

BEAT_SECONDS = 1.0
# The module a Pod's user site starts this from (backends/kubernetes/autoreport_boot.py): a copy of this module,
# then no longer importable as torchjob.autoreport, which stand_down must reach too.
INJECTED_BOOT = "_torchjob_autoreport_boot"
_reporter: _AutoReporter | None = None


@dataclass(frozen=True)
class Handover:
    """What a reporter that has been beating hands to ``torchjob.train.MetricsLogger`` as it stands down: its last
    report (without when it was written) and its count of steady beats. A process beats on without a gap: one
    that falls silent until its logger's first step, when a step of the optimizer's had already been counted (a
    DCP checkpoint's load makes AdamW's state with one), is taken for hung by the peers that still beat."""

    report: dict[str, Any]
    steady: beats.SteadyBeats


class _AutoReporter:
    def __init__(self, heartbeat: Path, operator: reporting.Reporter | None = None) -> None:
        """Beats go to ``operator`` where one listens (in a Pod), else to the ``heartbeat`` file."""
        self.heartbeat = heartbeat
        self.operator = operator
        self.steps = 0
        self.step_time = 0.0
        self.seconds_per_step: float | None = None
        self.gaps = sections.StepGaps()
        self.steady = beats.SteadyBeats(BEAT_SECONDS)
        self.hooked = False
        self.active = True
        self._lock = threading.Lock()
        threading.Thread(target=self._run, name="torchjob-autoreport", daemon=True).start()

    def on_step(self, *_: Any) -> None:
        """The optimizer-step hook: a step completed."""
        now = time.time()
        with self._lock:
            if self.steps:
                period = now - self.step_time
                smoothed = self.seconds_per_step
                self.seconds_per_step = period if smoothed is None else 0.8 * smoothed + 0.2 * period
            self.steps += 1
            self.step_time = now
            self.gaps.on_step()

    def _run(self) -> None:
        while self.active:
            if not self.hooked:
                self._hook()
            if self.steps:
                self._beat()
            time.sleep(BEAT_SECONDS)

    def _hook(self) -> None:
        # Only once the script imported torch.optim (importing it here would cost every process torch).
        optimizer = sys.modules.get("torch.optim.optimizer")
        register = getattr(optimizer, "register_optimizer_step_post_hook", None)
        if register is not None:
            register(self.on_step)
            self.hooked = True

    def last_words(self) -> None:
        """At exit: one last report that says so (a process that exits on its own is not lost when it falls
        silent), where a step was ever reported."""
        if self.active and self.steps:
            self._beat(exiting=True)

    def handover(self) -> Handover | None:
        """Its last report and steady count, where it has beaten (a step was counted)."""
        return Handover(self._stepped(), self.steady) if self.steps else None

    def _stepped(self) -> dict[str, Any]:
        """The steps counted so far, as a report's fields."""
        with self._lock:
            report: dict[str, Any] = {worker_files.REPORT_STEP: self.steps, worker_files.REPORT_TIME: self.step_time}
            if self.seconds_per_step is not None:
                report[worker_files.REPORT_SECONDS_PER_STEP] = self.seconds_per_step
            report.update(self.gaps.report_fields())
        return report

    def _beat(self, exiting: bool = False) -> None:
        report = self._stepped()
        if exiting:
            report[worker_files.REPORT_EXITING] = True
        report.update(sections.report_fields())
        report[worker_files.REPORT_ALIVE] = time.time()
        report[worker_files.REPORT_BEATING_FOR] = self.steady.beat()
        if self.operator is not None:
            self.operator.send(report)  # quiet, and never raises: the next beat tries again
            return
        try:
            self.heartbeat.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.heartbeat.with_suffix(".auto.tmp")
            tmp.write_text(json.dumps(report))
            os.replace(tmp, self.heartbeat)
        except OSError:
            pass  # a full disk or a removed folder must not disturb the script: the report is best effort


def start() -> None:
    """Report this process's training, if torchjob asked for it (``TORCHJOB_AUTOREPORT``) in a replica."""
    global _reporter
    if _reporter is not None or os.environ.get(worker_files.ENV_AUTOREPORT) != "1":
        return
    replica, rank = os.environ.get(worker_files.ENV_REPLICA), os.environ.get("RANK")
    if replica is None or rank is None or not rank.isdigit():
        return
    # A process that never steps (torchrun's agent, a DataLoader worker) never writes: only steps start beats.
    key = worker_files.process_key(replica, int(os.environ.get("LOCAL_RANK", "0")), int(rank))
    heartbeat = worker_files.heartbeat_file(worker_files.output_dir(), key)
    _reporter = _AutoReporter(heartbeat, reporting.Reporter.from_env(quiet=True))
    atexit.register(_reporter.last_words)


def restart_in_child() -> None:
    """In a process forked from a reporting one, once it knows its own ranks (another local rank of its replica,
    ``train/local_ranks.py``): the fork copied the parent's reporter but not its thread, so this process reports
    its own steps under its own key from a reporter of its own."""
    _restart_own()
    injected = getattr(sys.modules.get(INJECTED_BOOT), "restart_in_child", None)
    if callable(injected):
        injected()


def _restart_own() -> None:
    global _reporter
    if _reporter is None or not _reporter.active:
        return
    _reporter.active = False  # its hook, inherited, still counts into it: nobody reads it
    _reporter = None
    start()


def stand_down() -> Handover | None:
    """The script reports through ``torchjob.train`` itself: stop writing its heartbeat. Where the reporter has
    been beating, what the logger beats on with (``Handover``)."""
    handed = None
    if _reporter is not None:
        handed = _reporter.handover() if _reporter.active else None
        _reporter.active = False
    injected = getattr(sys.modules.get(INJECTED_BOOT), "stand_down", None)
    if callable(injected):
        found = injected()  # a Pod's reporter, started from the copy the operator mounts (its own Handover class)
        handed = handed or (found if isinstance(getattr(found, "report", None), dict) else None)
    return handed
