"""What replicas say of themselves, read from the wire: a trainer's progress report, an in-place member's
announcement, a Pod launcher's word on its trainer. Each parser takes the JSON as it came (``worker_files`` names
the keys) and gives None for anything that is not one: a report is never trusted to be well formed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from torchjob import worker_files


@dataclass(frozen=True)
class Progress:
    """What one replica last reported of its training (torchjob.train's heartbeat), and when it came.

    ``at`` is when the step completed (locally) or when the first report of that step arrived (on a cluster,
    by the operator's clock, so a Pod's skewed clock cannot fake progress). ``alive_at`` is when the process
    last proved it runs (its reporting thread beat), whether or not the step moved. The rest is as reported;
    None when not reported.
    """

    at: datetime
    step: int
    total_steps: int | None = None
    loss: float | None = None
    samples_per_second: float | None = None
    seconds_per_step: float | None = None
    alive_at: datetime | None = None
    # The process said it is exiting on its own (its last report): silence after it proves nothing.
    exiting: bool = False
    # Since when its reporting thread has beaten without a stall (``torchjob/beats.py``): from then on it is a
    # witness to another process's silence. None when the report does not say (an older torchjob).
    beating_since: datetime | None = None
    # What hang detection learns from (policies/learned.py): the longest gap between two of its steps (time
    # in named phases left out) and how many gaps it has seen; the phase it is in and since when; the longest
    # it has seen of each phase.
    longest_gap: float | None = None
    gaps_seen: int = 0
    section: str | None = None
    section_since: datetime | None = None
    sections_longest: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_report(
        cls, report: Mapping[str, object], at: datetime, alive_at: datetime | None = None
    ) -> Progress | None:
        """A report as the worker wrote it (``worker_files`` names the keys); None when it is not one."""
        step = _whole(report.get(worker_files.REPORT_STEP))
        if step is None:
            return None
        return cls(
            at,
            step,
            alive_at=alive_at,
            total_steps=_whole(report.get(worker_files.REPORT_TOTAL_STEPS)) or None,
            loss=_finite(report.get(worker_files.REPORT_LOSS)),
            samples_per_second=_finite(report.get(worker_files.REPORT_SAMPLES_PER_SECOND)),
            seconds_per_step=_finite(report.get(worker_files.REPORT_SECONDS_PER_STEP)),
            exiting=report.get(worker_files.REPORT_EXITING) is True,
            beating_since=_since(alive_at, report.get(worker_files.REPORT_BEATING_FOR)),
            longest_gap=_finite(report.get(worker_files.REPORT_LONGEST_GAP)),
            gaps_seen=_whole(report.get(worker_files.REPORT_GAPS_SEEN)) or 0,
            sections_longest=_durations(report.get(worker_files.REPORT_SECTIONS_LONGEST)),
            **_section(report.get(worker_files.REPORT_SECTION), alive_at or at),
        )


def _whole(value: object) -> int | None:
    """A non-negative integer as JSON gives it (a bool is not one); None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _durations(value: object) -> dict[str, float]:
    if not isinstance(value, Mapping):
        return {}
    found = {str(name): _finite(seconds) for name, seconds in value.items()}
    return {name: seconds for name, seconds in found.items() if seconds is not None and seconds >= 0}


def _section(value: object, reported_at: datetime) -> dict[str, Any]:
    """The phase a report says the process is in, dated by the report's own time less the time spent in it
    (a duration: a Pod's skewed clock cannot move it)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        return {}
    elapsed = _finite(value.get("elapsed"))
    if elapsed is None or elapsed < 0:
        return {}
    return {"section": value["name"], "section_since": reported_at - timedelta(seconds=elapsed)}


def _since(alive_at: datetime | None, seconds: object) -> datetime | None:
    """``alive_at`` less a reported duration (a duration: a Pod's skewed clock cannot move it)."""
    elapsed = _finite(seconds)
    if alive_at is None or elapsed is None or elapsed < 0:
        return None
    return alive_at - timedelta(seconds=elapsed)


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class MemberAnnouncement:
    """What a member of an in-place group last said of itself, from its watching thread: it trains under the
    in-place loop of ``attempt``, it runs (``heard_at``, sent every ``every`` seconds), and, when its step
    has waited past its allowance, the generation of that step (``waiting_in``): a peer it needs is silent.
    ``longest_gap``: the longest time between two of its announcements in the attempt, by its own count or as
    heard (``silent_member.with_longest_gap``): how late a healthy member of this load can be. ``settled``: it has
    trained a step in the group as it now is (not joining it, nor re-forming it)."""

    attempt: int
    heard_at: datetime
    every: float | None = None
    waiting_in: int | None = None
    longest_gap: float = 0.0
    settled: bool = False
    # Since when it has announced without a stall (``torchjob/beats.py``): a witness to a peer's silence from then.
    steady_since: datetime | None = None

    @classmethod
    def from_message(cls, message: object, heard_at: datetime) -> MemberAnnouncement | None:
        """An announcement as a member sent it (``worker_files`` names the keys); None when it is not one."""
        if not isinstance(message, Mapping):
            return None
        attempt = _whole(message.get(worker_files.ANNOUNCE_ATTEMPT))
        if attempt is None:
            return None
        every = _finite(message.get(worker_files.ANNOUNCE_EVERY))
        waiting = _whole(message.get(worker_files.ANNOUNCE_WAITING))  # the first generation is 0
        gap = max(_finite(message.get(worker_files.ANNOUNCE_LONGEST_GAP)) or 0.0, 0.0)
        settled = message.get(worker_files.ANNOUNCE_SETTLED) is True
        steady = _since(heard_at, message.get(worker_files.ANNOUNCE_STEADY_FOR))
        return cls(attempt, heard_at, every if every and every > 0 else None, waiting, gap, settled, steady)


@dataclass(frozen=True)
class TrainerState:
    """What a Pod's launcher (torchjob.launch) last said of its trainer: it runs ``attempt``, or it ended with
    ``exit_code`` (first heard at ``ended_at``, by the operator's clock); ``heard_at``: when it last said so."""

    attempt: int
    heard_at: datetime
    exit_code: int | None = None
    ended_at: datetime | None = None

    @classmethod
    def from_message(cls, message: object, heard_at: datetime) -> TrainerState | None:
        """A trainer's state as its launcher sent it (``worker_files`` names the keys); None when it is not one."""
        if not isinstance(message, Mapping):
            return None
        attempt, code = _whole(message.get(worker_files.TRAINER_ATTEMPT)), message.get(worker_files.TRAINER_EXIT_CODE)
        exit_code = _whole(code)
        if attempt is None or (code is not None and (exit_code is None or exit_code > 255)):
            return None
        return cls(attempt, heard_at, exit_code, heard_at if exit_code is not None else None)
