"""The one contract between a training process (``torchjob.train``) and the controller that watches it.

The worker writes, the controller reads, and both name the files through this module, so they cannot
disagree. It imports neither torch nor the controller side: both sides can import it.

In the job's output folder (``TORCHJOB_OUTPUT_DIR``)::

    heartbeat/<process>.json    {"step": N, "time": when step N completed}: the progress of one process
    preempted/<process>.json    {"time": when the process got an outside SIGTERM}: a preemption notice
    metrics/rank-<rank>.jsonl   one line per logged step (what `torchjob metrics` reads)

``<process>`` is ``<replica>-<local rank>`` (``worker-0-1``: the second process of replica worker-0, under
torchrun with ``nprocPerNode: 2``), so the controller finds every process of a replica by its name. Outside
torchjob (no ``TORCHJOB_REPLICA``) it is ``rank-<global rank>``.
"""

from __future__ import annotations

import re
from pathlib import Path

ENV_OUTPUT_DIR = "TORCHJOB_OUTPUT_DIR"
ENV_REPLICA = "TORCHJOB_REPLICA"
ENV_ATTEMPT = "TORCHJOB_ATTEMPT"
HEARTBEAT_DIR = "heartbeat"
PREEMPTED_DIR = "preempted"
METRICS_DIR = "metrics"


def process_key(replica: str | None, local_rank: int, rank: int) -> str:
    """How one training process names its files."""
    return f"{replica}-{local_rank}" if replica else f"rank-{rank}"


def heartbeat_file(output_dir: str | Path, key: str) -> Path:
    return Path(output_dir) / HEARTBEAT_DIR / f"{key}.json"


def preemption_file(output_dir: str | Path, key: str) -> Path:
    return Path(output_dir) / PREEMPTED_DIR / f"{key}.json"


def metrics_file(output_dir: str | Path, rank: int) -> Path:
    return Path(output_dir) / METRICS_DIR / f"rank-{rank}.jsonl"


def replica_files(folder: Path, replica: str) -> list[Path]:
    """The files of every process of ``replica`` in ``folder`` (``worker-1-0.json``, ``worker-1-1.json``;
    never ``worker-10-0.json``)."""
    pattern = re.compile(rf"^{re.escape(replica)}-\d+\.json$")
    return sorted(p for p in folder.glob(f"{replica}-*.json") if pattern.match(p.name))
