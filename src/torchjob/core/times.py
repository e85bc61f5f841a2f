"""Timestamps as Kubernetes writes them (RFC 3339, UTC, whole seconds), and back."""

from __future__ import annotations

from datetime import datetime, timezone

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def timestamp(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime(_FORMAT)


def parse_timestamp(text: str) -> datetime:
    return datetime.strptime(text, _FORMAT).replace(tzinfo=timezone.utc)
