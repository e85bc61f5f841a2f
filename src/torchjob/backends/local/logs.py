"""Reading replica logs: the root cause of a failure (the exception, or the last lines) and following."""

from __future__ import annotations

import json
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


def failure_summary(path: Path, lines: int = 3, error_file: Path | None = None) -> str | None:
    """The exception a failed replica raised (``ValueError: bad input``), else its last few output lines.

    The torchelastic error file, when the replica wrote one, is the most reliable source: it holds the
    exception even when the output was redirected or cut.
    """
    recorded = _error_file_message(error_file) if error_file is not None else None
    if recorded:
        return _clip(recorded)
    text = read_tail(path)
    all_lines = [line.rstrip() for line in text.splitlines()]
    exception = _last_exception(all_lines)
    if exception:
        return _clip(exception)
    last = [line.strip() for line in all_lines if line.strip()][-lines:]
    return _clip(" | ".join(last)) if last else None


def _error_file_message(path: Path) -> str | None:
    """The message of a torchelastic error file: ``{"message": {"message": "...", "extraInfo": {...}}}``."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    if not isinstance(message, str) or not message.strip():
        return None
    return message.strip().splitlines()[0]


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
