"""The controller's half of in-place repair on this machine: telling a running group who its members are,
and reading which processes can be repaired around (see ``torchjob.train.in_place`` for the other half).

Both go through files in the job's output folder (``worker_files``): the controller side never imports
torch, and a file is what a process polls at no cost while it waits.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from torchjob import worker_files
from torchjob.core.reported import MemberAnnouncement


def announced(output_dir: Path, key: str, attempt: int) -> bool:
    """Whether process ``key`` announced, in ``attempt``, that it trains under the in-place loop (a spare:
    that it is warm and waiting)."""
    return announcement(output_dir, key, attempt) is not None


def announcement(output_dir: Path, key: str, attempt: int) -> MemberAnnouncement | None:
    """What process ``key`` last announced in ``attempt`` (None: nothing, or an earlier attempt's), dated by
    the time it wrote in it (the same machine's clock)."""
    try:
        data = json.loads(worker_files.inplace_file(output_dir, key).read_text())
        sent = datetime.fromtimestamp(float(data[worker_files.ANNOUNCE_TIME]), timezone.utc)
    except (OSError, ValueError, KeyError, TypeError, OverflowError):
        return None
    found = MemberAnnouncement.from_message(data, sent)
    return found if found is not None and found.attempt == attempt else None


def publish(output_dir: Path, membership: worker_files.Membership) -> None:
    """Write the group's next membership where its members poll it (atomically: a reader never sees half)."""
    path = worker_files.membership_file(output_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(membership))
    os.replace(tmp, path)


def published(output_dir: Path) -> tuple[int, int] | None:
    """The (attempt, generation) of the membership the group can read now; None when there is none."""
    try:
        found = worker_files.parse_membership(json.loads(worker_files.membership_file(output_dir).read_text()))
    except (OSError, ValueError):
        return None
    return None if found is None else (found["attempt"], found["generation"])
