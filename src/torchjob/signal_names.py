"""A signal's name for messages (``SIGKILL``), shared by the worker side and the planner, which may not import
each other."""

from __future__ import annotations

import signal


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal 99`` for a number no signal has."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
