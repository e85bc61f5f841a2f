"""The record of a job's attempts in its status: each attempt's start, end and outcome, and moving to the next.

An attempt is one group of replicas that trained together; a group restart or a suspension ends it, and the
next one starts with ``status.attempt`` one higher (``status.attempts`` keeps them all for ``torchjob get``).
"""

from __future__ import annotations

from datetime import datetime

from torchjob.api.types import AttemptRecord, JobStatus
from torchjob.core.times import parse_timestamp, timestamp


def _current_record(status: JobStatus) -> AttemptRecord | None:
    return next((a for a in status.attempts if a.attempt == status.attempt), None)


def training_since(status: JobStatus) -> datetime | None:
    """When the current attempt's group last started training: its start, its last repair in place, or its
    last elastic membership change."""
    record = _current_record(status)
    if record is None:
        return None
    times = (record.repaired_time or record.start_time, record.regrouped_time)
    return max(parse_timestamp(t) for t in times if t)


def started_at(status: JobStatus) -> datetime | None:
    """When the current attempt's group last started up: the attempt's start, or its last elastic membership
    change (torchrun starts every worker again then)."""
    record = _current_record(status)
    if record is None:
        return None
    return max(parse_timestamp(t) for t in (record.start_time, record.regrouped_time) if t)


def restarted_by_regroup(status: JobStatus) -> bool:
    """Whether the current attempt's group last started up at an elastic membership change, not its start."""
    record = _current_record(status)
    return record is not None and record.regrouped_time is not None


def repaired_at(status: JobStatus) -> datetime | None:
    """When the current attempt's group was last repaired (re-formed) in place; None if it never was."""
    record = _current_record(status)
    return parse_timestamp(record.repaired_time) if record is not None and record.repaired_time else None


def note_repair(status: JobStatus, now: datetime) -> None:
    record = _current_record(status)
    if record is not None:
        record.repaired_time = timestamp(now)


def spare_awaited_since(status: JobStatus) -> datetime | None:
    """When the current attempt's group began to wait for a warm spare (None: it does not wait for one)."""
    record = _current_record(status)
    return parse_timestamp(record.spare_awaited_time) if record is not None and record.spare_awaited_time else None


def note_spare_awaited(status: JobStatus, since: datetime | None) -> None:
    record = _current_record(status)
    if record is not None:
        record.spare_awaited_time = timestamp(since) if since is not None else None


def note_regroup(status: JobStatus, now: datetime) -> None:
    record = _current_record(status)
    if record is not None:
        record.regrouped_time = timestamp(now)


def open_current(status: JobStatus, now: datetime) -> None:
    """Record that the current attempt has started (once)."""
    if not any(a.attempt == status.attempt for a in status.attempts):
        status.attempts.append(AttemptRecord(attempt=status.attempt, start_time=timestamp(now)))


def close_current(status: JobStatus, outcome: str, now: datetime) -> None:
    for record in status.attempts:
        if record.attempt == status.attempt and record.end_time is None:
            record.end_time = timestamp(now)
            record.outcome = outcome


def end_current(status: JobStatus, outcome: str, now: datetime) -> None:
    """Close the current attempt and move to the next: it starts with a fresh group and no pending replacement."""
    close_current(status, outcome, now)
    status.attempt += 1
    status.replacement_due = {}
