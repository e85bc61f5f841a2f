"""Per-rank training metrics as JSON lines, and the heartbeat the controller side reads.

Files, in the job's output folder (``TORCHJOB_OUTPUT_DIR``; names from ``torchjob.worker_files``)::

    metrics/rank-<r>.jsonl      one line per logged step: attempt, step, epoch, loss, samples/s, step and
                                checkpoint time
    tensorboard/attempt-<a>/rank-<r>/
                                the same numbers as TensorBoard scalars (``torchjob.train.tensorboard``)
    heartbeat/<process>.json    the progress report: {"step": N, "time": when step N completed, "total_steps",
                                "loss", "samples_per_second", "seconds_per_step", "alive": when written,
                                "beating_for": seconds since its beats last stalled (``torchjob.beats``),
                                and what hang detection learns from: the longest step gap and the phase
                                (``torchjob.sections``) the process is in},
                                rewritten atomically by a small background thread every ``heartbeat_seconds``
                                once the first step is done (at once, where ``torchjob.autoreport`` was beating
                                for the process before the logger was made: it beats on from that report).
                                "time" moves only with the step; "alive" moves as long as the process runs:
                                of a hung group (every "time" stuck), a rank that stopped beating (SIGSTOP,
                                a frozen node) is the one the others wait for

On a cluster the same thread also sends each new report to the operator (``torchjob.reporting``).
``torchjob metrics NAME`` summarises the JSONL files and can plot them; hang detection reads heartbeats, and
``status.trainerStatus`` (progress %, time left) comes from the reports: pass ``total_steps`` for a percentage.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from torchjob import autoreport, beats, sections, worker_files
from torchjob.reporting import Reporter
from torchjob.train.context import DistContext
from torchjob.train.tensorboard import TensorBoardScalars


class MetricsLogger:
    def __init__(
        self,
        ctx: DistContext,
        output_dir: str | os.PathLike[str] | None = None,
        heartbeat_seconds: float = 1.0,
        total_steps: int | None = None,
        tensorboard: bool = True,
    ) -> None:
        root = Path(output_dir or worker_files.output_dir())
        self.ctx = ctx
        self.path = worker_files.metrics_file(root, ctx.rank)
        key = worker_files.process_key(os.environ.get(worker_files.ENV_REPLICA), ctx.local_rank, ctx.rank)
        self.heartbeat_path = worker_files.heartbeat_file(root, key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.heartbeat_path.parent.mkdir(parents=True, exist_ok=True)
        self.heartbeat_seconds = heartbeat_seconds
        # The number of the last step, when the script knows it: progress is reported as step / total_steps.
        self.total_steps = total_steps
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - line-buffered for the whole run
        self._scalars = TensorBoardScalars(root, ctx.rank) if tensorboard else None
        self._attempt = worker_files.attempt()
        self._reporter = Reporter.from_env()
        self._latest: dict[str, Any] | None = None
        self._seconds_per_step: float | None = None
        self._gaps = sections.StepGaps()
        self._stop = threading.Event()
        self._wake = threading.Event()  # the first step is written at once, not at the writer's next tick
        # This logger reports the process's steps itself. Where the process's reporter has been beating, this one
        # beats on from its last report at once (until its own first step), not silent until its first step.
        handed = autoreport.stand_down()
        self._handed = handed.report if handed is not None else None
        self._steady = handed.steady if handed is not None else beats.SteadyBeats(heartbeat_seconds)
        self._writer = threading.Thread(target=self._write_heartbeats, name="torchjob-heartbeat", daemon=True)
        self._writer.start()
        if handed is not None:
            self._wake.set()

    def step(
        self,
        step: int,
        epoch: int,
        loss: float,
        samples: int,
        step_seconds: float,
        checkpoint_seconds: float = 0.0,
        **extra: Any,
    ) -> None:
        record = {
            "time": time.time(),
            "rank": self.ctx.rank,
            "attempt": self._attempt,
            "step": step,
            "epoch": epoch,
            "loss": loss,
            "samples_per_second": samples / step_seconds if step_seconds > 0 else 0.0,
            "step_seconds": step_seconds,
            "checkpoint_seconds": checkpoint_seconds,
            **extra,
        }
        self._file.write(json.dumps(record) + "\n")
        if self._scalars is not None:
            scalars = {k: v for k, v in record.items() if k not in ("time", "rank", "attempt", "step")}
            self._scalars.add(step, record["time"], scalars)
        self.beat(step, loss=loss, samples_per_second=record["samples_per_second"])

    def beat(self, step: int, loss: float | None = None, samples_per_second: float | None = None) -> None:
        """Record that ``step`` has completed (free: the writer thread persists and reports it)."""
        now = time.time()
        previous = self._latest
        if previous is not None and step > previous[worker_files.REPORT_STEP]:
            # The wall time a step really takes here (data loading and logging included), smoothed.
            period = (now - previous[worker_files.REPORT_TIME]) / (step - previous[worker_files.REPORT_STEP])
            smoothed = self._seconds_per_step
            self._seconds_per_step = period if smoothed is None else 0.8 * smoothed + 0.2 * period
        if previous is None or step > previous[worker_files.REPORT_STEP]:
            self._gaps.on_step()
        if previous is None:
            # A process frozen in its first second must have beaten once: a process that never reported is
            # compared with nobody, and a frozen one would then be found only by the progress deadline.
            self._wake.set()
        self._latest = {
            worker_files.REPORT_STEP: step,
            worker_files.REPORT_TIME: now,
            worker_files.REPORT_TOTAL_STEPS: self.total_steps,
            worker_files.REPORT_LOSS: loss,
            worker_files.REPORT_SAMPLES_PER_SECOND: samples_per_second,
            worker_files.REPORT_SECONDS_PER_STEP: self._seconds_per_step,
            **self._gaps.report_fields(),
        }

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._writer.join()
        self._file.close()
        if self._scalars is not None:
            self._scalars.close()

    def _write_heartbeats(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.heartbeat_seconds)
            self._wake.clear()
            if self._stop.is_set():
                break
            self._flush_heartbeat()
        self._flush_heartbeat(exiting=True)  # closed: the process's silence from now on is its own doing

    def _flush_heartbeat(self, exiting: bool = False) -> None:
        latest = self._latest if self._latest is not None else self._handed
        if latest is None:
            return
        report = {key: value for key, value in latest.items() if value is not None}
        report.update(sections.report_fields())  # the phase it is in now, not at its last step
        report[worker_files.REPORT_ALIVE] = time.time()
        report[worker_files.REPORT_BEATING_FOR] = self._steady.beat()
        if exiting:
            report[worker_files.REPORT_EXITING] = True
        tmp = self.heartbeat_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(report))
        os.replace(tmp, self.heartbeat_path)
        if self._reporter is not None:
            self._reporter.send(report)
