"""Timestamps as Kubernetes writes them (RFC 3339, UTC, whole seconds), and back."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def timestamp(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime(_FORMAT)


def parse_timestamp(text: str) -> datetime:
    return datetime.strptime(text, _FORMAT).replace(tzinfo=timezone.utc)


# The latest moment a deadline can name: far beyond any job, and still a valid date for every computation.
NEVER = datetime(9999, 1, 1, tzinfo=timezone.utc)


def later(start: datetime, seconds: float) -> datetime:
    """``start`` plus ``seconds``; a sum past year 9999 (an int64 deadline) is ``NEVER``, not an error."""
    try:
        return min(start + timedelta(seconds=seconds), NEVER)
    except OverflowError:
        return NEVER


def age_seconds(created: str | None, now: datetime) -> float:
    """Seconds since an object's ``creationTimestamp`` (0 when it has none yet)."""
    return (now - parse_timestamp(created)).total_seconds() if created else 0.0
