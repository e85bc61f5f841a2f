"""Waiting for what a scenario expects: one poll with a deadline, and a message naming what never came. Every tier's
tests wait through it (a Kubernetes test's check is a ``kubectl`` call: a fifth of a second between calls keeps a
long wait from loading the machine)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T],
    timeout: float = 120,
    what: str = "condition",
    every: float = 0.2,
    detail: Callable[[], object] | None = None,
    ended: Callable[[], str | None] | None = None,
) -> T:
    """Call ``check`` every ``every`` seconds until it returns something true, and return that; fail after
    ``timeout`` seconds, naming ``what`` and, where given, what ``detail`` says then (the state that explains it).
    ``ended``, where given, says what happened instead once waiting on is pointless (a Pod that ended in the other
    phase): the wait fails at once with it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        instead = ended() if ended is not None else None
        if instead:
            raise AssertionError(f"{instead}, waiting for {what}" + (f": {detail()}" if detail is not None else ""))
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}" + (f": {detail()}" if detail is not None else ""))
