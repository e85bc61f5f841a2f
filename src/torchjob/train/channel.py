"""How a training process under in-place repair talks to its controller: announcing that it can be repaired
around (a spare: that it is warm), and reading the group's membership.

Locally it is files in the job's output folder (``worker_files``): a file is what a process polls at no cost.
In a Pod it is the operator's endpoints, found from ``TORCHJOB_REPORT_URL`` and authenticated with the same
projected token as the progress reports (``torchjob.reporting``): the Pod has no API credentials.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from torchjob import beats, worker_files
from torchjob.reporting import call_operator, operator_from_env


class Channel(Protocol):
    # How often a waiting process asks for the membership again.
    poll_seconds: float
    # How often a training process of an elastic group looks for a new membership, in the background.
    watch_seconds: float
    # How often a member of a group says it runs (and whether its step waits on a silent peer).
    alive_seconds: float
    # Whether an announcement is answered with the membership, so that a member's watching thread needs only
    # the one call (a request in a Pod); a file costs nothing to read, so the file channel reads it apart.
    answers_with_membership: bool
    # Whether the controller tells a member on notice of eviction once it has looked at the notice
    # (``notice_considered``, set from the answer that said so): the operator does; the file channel cannot.
    tells_notice_considered: bool
    notice_considered: bool

    def announce(self, key: str, attempt: int, more: dict[str, Any] | None = None) -> worker_files.Membership | None:
        """Say it; the group's membership when ``answers_with_membership`` (None: none published yet)."""
        ...

    def membership(self) -> worker_files.Membership | None: ...


# An announcement this much later than the last ends its steady run: a member resumed from a stall of the machine
# witnesses a peer's silence only from then (``core/policies/silent_member``). Five missed announcements: a
# member of a loaded machine late by more is rare, and one that is only delays a verdict by one allowance.
ANNOUNCEMENT_STALL_SECONDS = 1.0


class LongestGap:
    """The longest time between two announcements of this process so far, sent with each: a member of a loaded
    machine says how late it can be, and is allowed that much more silence (``core/policies/silent_member``).
    With it, for how long it has announced without a stall (``steady_for``)."""

    def __init__(self) -> None:
        self._last: float | None = None
        self.seconds = 0.0
        self.steady_for = 0.0
        self._steady = beats.SteadyBeats(0.0, stall=ANNOUNCEMENT_STALL_SECONDS)

    def said_now(self) -> float:
        now = time.monotonic()
        if self._last is not None:
            self.seconds = max(self.seconds, now - self._last)
        self._last = now
        self.steady_for = round(self._steady.beat(now), 3)
        return round(self.seconds, 3)


class FileChannel:
    poll_seconds = 0.005
    watch_seconds = 0.05
    alive_seconds = 0.2  # a file write: the controller confirms a silent member in 1.5 s
    answers_with_membership = False
    tells_notice_considered = False
    notice_considered = False

    def __init__(self, output_dir: str) -> None:
        self.output_dir = output_dir
        self.gap = LongestGap()

    def announce(self, key: str, attempt: int, more: dict[str, Any] | None = None) -> worker_files.Membership | None:
        path = worker_files.inplace_file(self.output_dir, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # A file of this thread's own: the training thread and the membership watch both announce.
        tmp = path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
        message = {
            worker_files.ANNOUNCE_ATTEMPT: attempt,
            worker_files.ANNOUNCE_TIME: time.time(),
            worker_files.ANNOUNCE_LONGEST_GAP: self.gap.said_now(),
            worker_files.ANNOUNCE_STEADY_FOR: self.gap.steady_for,
            **(more or {}),
        }
        tmp.write_text(json.dumps(message))
        os.replace(tmp, path)
        return None  # the membership is another file, read at no cost

    def membership(self) -> worker_files.Membership | None:
        try:
            data = json.loads(worker_files.membership_file(self.output_dir).read_text())
        except (OSError, ValueError):
            return None
        return worker_files.parse_membership(data)


class OperatorChannel:
    poll_seconds = 0.05
    # One request per member every 0.15 s does both: the announcement is answered with the membership. So a
    # silent member is confirmed in under half a second, and a grown group re-forms within 0.15 s of the
    # decision (a member that waits on a silent peer looks every poll_seconds).
    watch_seconds = 0.15
    alive_seconds = 0.15
    answers_with_membership = True
    tells_notice_considered = True

    def __init__(self, report_url: str, token_file: Path) -> None:
        self.notice_considered = False
        self.gap = LongestGap()
        self.announcements = worker_files.operator_endpoint(report_url, "announcements")
        self.memberships = worker_files.operator_endpoint(report_url, "membership")
        self.token_file = token_file

    def announce(self, key: str, attempt: int, more: dict[str, Any] | None = None) -> worker_files.Membership | None:
        # The operator files it under the Pod the token names (and dates it by its own clock); the key is only
        # for its log. Its answer is the membership (None: none published yet, or the call failed).
        gap = self.gap.said_now()
        said = {
            worker_files.ANNOUNCE_ATTEMPT: attempt,
            "key": key,
            worker_files.ANNOUNCE_LONGEST_GAP: gap,
            worker_files.ANNOUNCE_STEADY_FOR: self.gap.steady_for,
            **(more or {}),
        }
        return worker_files.parse_membership(self._call(self.announcements, said))

    def membership(self) -> worker_files.Membership | None:
        return worker_files.parse_membership(self._call(self.memberships, None))

    def _call(self, url: str, body: dict[str, Any] | None) -> Any:
        try:
            text = call_operator(url, self.token_file, body)
        except (OSError, ValueError):
            return None  # asked again at the next poll; a process that is never answered times out
        answer = json.loads(text) if text else None
        if isinstance(answer, dict) and answer.get(worker_files.NOTICE_CONSIDERED) is True:
            self.notice_considered = True
        return answer


def from_env() -> Channel:
    """The operator's endpoints in a Pod it gave them to; else the job's output folder."""
    found = operator_from_env()
    return OperatorChannel(*found) if found else FileChannel(worker_files.output_dir())
