"""The controller's half of in-place repair on this machine: telling a running group who its members are,
and reading which processes can be repaired around (see ``torchjob.train.inplace`` for the other half).

Both go through files in the job's output folder (``worker_files``): the controller side never imports
torch, and a file is what a process polls at no cost while it waits.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from torchjob import worker_files
from torchjob.core.policies import repair


def announced(output_dir: Path, key: str, attempt: int) -> bool:
    """Whether process ``key`` announced, in ``attempt``, that it trains under the in-place loop (a spare:
    that it is warm and waiting)."""
    try:
        data = json.loads(worker_files.inplace_file(output_dir, key).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("attempt") == attempt


def publish(output_dir: Path, attempt: int, members: Sequence[str], promoted: Sequence[tuple[str, str]]) -> int:
    """Write the group's next membership (``members`` in rank order, ``promoted`` spares joining it as the
    replicas they became). Returns its generation."""
    path = worker_files.membership_file(output_dir)
    generation, previous = 0, None
    try:
        previous = json.loads(path.read_text())
        if previous.get("attempt") == attempt:
            generation = int(previous.get("generation", 0))
    except (OSError, ValueError, AttributeError, TypeError):
        previous = None
    body = repair.membership(attempt, generation + 1, members, dict(promoted), previous if generation else None)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)
    return generation + 1
