"""Reading replica logs: the root cause of a failure (the exception, or the last lines), and following them."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


class LogFollower:
    """Reads new complete lines from every replica log of every attempt, in the order they appear.

    Cheap enough to poll while training runs: files stay open between polls, and the folder is listed
    again only every ``rescan_seconds`` (new attempts and replicas appear rarely).
    """

    def __init__(self, logs_dir: Path, replica: str | None = None, rescan_seconds: float = 1.0) -> None:
        self.logs_dir = logs_dir
        self.replica = replica
        self.rescan_seconds = rescan_seconds
        self._files: dict[Path, Any] = {}
        self._partial: dict[Path, bytes] = {}
        self._scanned_at = 0.0

    def poll(self, final: bool = False, rescan: bool = False) -> Iterator[tuple[str, str]]:
        now = time.monotonic()
        if final or rescan or now - self._scanned_at >= self.rescan_seconds:
            self._scan()
            self._scanned_at = now
        for path, handle in self._files.items():
            data = handle.read()
            if not data and not (final and self._partial.get(path)):
                continue
            data = self._partial.pop(path, b"") + data
            lines = data.split(b"\n")
            rest = lines.pop()
            if rest and not final:
                self._partial[path] = rest
            elif rest:
                lines.append(rest)
            attempt = int(path.parent.name)
            label = path.stem if attempt == 0 else f"{path.stem}#{attempt}"
            for line in lines:
                yield label, line.decode("utf-8", errors="replace")
        if final:
            self.close()

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def _scan(self) -> None:
        if not self.logs_dir.is_dir():
            return
        found = sorted(self.logs_dir.glob("*/*.log"), key=lambda p: (int(p.parent.name), p.stem))
        for path in found:
            if path in self._files or (self.replica and path.stem != self.replica):
                continue
            try:
                self._files[path] = open(path, "rb")  # noqa: SIM115 - kept open across polls
            except OSError:
                continue
        # Keep attempt/replica order stable as files are added.
        self._files = dict(sorted(self._files.items(), key=lambda kv: (int(kv[0].parent.name), kv[0].stem)))
