"""Reading replica logs: the root cause of a failure (the exception, or the last lines) and following."""

from __future__ import annotations

import re
from pathlib import Path

_TAIL_BYTES = 64 * 1024
_TRACEBACK = "Traceback (most recent call last):"
# torchelastic's and multiprocessing's wrappers print the child's exception inside their own.
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure))(:.*)?$")
MAX_MESSAGE = 300


def read_tail(path: Path, size: int = _TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            end = f.tell()
            f.seek(max(0, end - size))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def failure_summary(path: Path, lines: int = 3) -> str | None:
    """The exception a failed replica raised (``ValueError: bad input``), else its last few output lines."""
    text = read_tail(path)
    all_lines = [line.rstrip() for line in text.splitlines()]
    exception = _last_exception(all_lines)
    if exception:
        return _clip(exception)
    last = [line.strip() for line in all_lines if line.strip()][-lines:]
    return _clip(" | ".join(last)) if last else None


def _last_exception(lines: list[str]) -> str | None:
    start = max((i for i, line in enumerate(lines) if line.strip() == _TRACEBACK), default=None)
    if start is None:
        # No traceback (e.g. a logged error then sys.exit): the last line that reads like an exception.
        return next((line.strip() for line in reversed(lines) if _EXCEPTION_LINE.match(line.strip())), None)
    # The exception is the first unindented line after the traceback's frames.
    for line in lines[start + 1 :]:
        if line and not line[0].isspace():
            return line.strip()
    return None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
