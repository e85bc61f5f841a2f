"""Waiting for what a scenario expects, with a deadline and a message naming what never came."""

from __future__ import annotations

import time
from typing import Any


def wait_for(predicate: Any, timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
