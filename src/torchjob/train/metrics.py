"""Per-rank training metrics as JSON lines, and the heartbeat the controller side reads.

Files, in the job's output folder (``TORCHJOB_OUTPUT_DIR``)::

    metrics/rank-<r>.jsonl      one line per logged step: step, epoch, loss, samples/s, step and checkpoint time
    heartbeat/rank-<r>.json     {"step": N, "time": unix seconds}, rewritten atomically at most once a second

``torchjob metrics NAME`` summarises the JSONL files and can plot them; hang detection reads heartbeats.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from torchjob.train.init import DistContext


class MetricsLogger:
    def __init__(
        self, ctx: DistContext, output_dir: str | os.PathLike[str] | None = None, heartbeat_seconds: float = 1.0
    ) -> None:
        root = Path(output_dir or os.environ.get("TORCHJOB_OUTPUT_DIR") or "output")
        (root / "metrics").mkdir(parents=True, exist_ok=True)
        (root / "heartbeat").mkdir(parents=True, exist_ok=True)
        self.ctx = ctx
        self.path = root / "metrics" / f"rank-{ctx.rank}.jsonl"
        self.heartbeat_path = root / "heartbeat" / f"rank-{ctx.rank}.json"
        self.heartbeat_seconds = heartbeat_seconds
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - line-buffered for the whole run
        self._last_beat = 0.0

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
            "step": step,
            "epoch": epoch,
            "loss": loss,
            "samples_per_second": samples / step_seconds if step_seconds > 0 else 0.0,
            "step_seconds": step_seconds,
            "checkpoint_seconds": checkpoint_seconds,
            **extra,
        }
        self._file.write(json.dumps(record) + "\n")
        self.beat(step)

    def beat(self, step: int) -> None:
        """Record progress (cheap: at most one small atomic write a second)."""
        now = time.time()
        if now - self._last_beat < self.heartbeat_seconds:
            return
        self._last_beat = now
        tmp = self.heartbeat_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": step, "time": now}))
        os.replace(tmp, self.heartbeat_path)

    def close(self) -> None:
        self._file.close()
