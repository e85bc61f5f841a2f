"""TensorBoard event files for ``torchjob.train.MetricsLogger``'s metrics, with no change to the script.

Layout, in the job's output folder (``worker_files.tensorboard_dir``): one run per attempt and rank, the
standard ``SummaryWriter`` layout, so ``tensorboard --logdir <output>/tensorboard`` shows every rank of every
attempt side by side (``torchjob metrics NAME --tensorboard`` prints that folder)::

    tensorboard/attempt-<a>/rank-<r>/events.out.tfevents.*

The writer is torch's own (``torch.utils.tensorboard``, which needs the ``tensorboard`` package: torchjob's
``train`` extra installs it). Without it, nothing is written and training goes on.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from torchjob import worker_files


class TensorBoardScalars:
    def __init__(self, output_dir: str | os.PathLike[str], rank: int) -> None:
        attempt = worker_files.attempt()
        self.log_dir = worker_files.tensorboard_run_dir(Path(output_dir), attempt, rank)
        try:
            from torch.utils.tensorboard import SummaryWriter  # optional, and 0.25 s to import: only when used
        except ImportError:
            self._writer: Any = None
            return
        # Flushed every few seconds, so a TensorBoard open during training follows it.
        self._writer = SummaryWriter(log_dir=str(self.log_dir), flush_secs=5)

    def add(self, step: int, wall_time: float, scalars: dict[str, Any]) -> None:
        if self._writer is None:
            return
        for tag, value in scalars.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                self._writer.add_scalar(tag, value, global_step=step, walltime=wall_time)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
