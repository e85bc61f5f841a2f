"""Filling a job file's Jinja2 placeholders from a JSON file of values (``--values``), safely.

The template is untrusted input, so it runs in Jinja2's ``SandboxedEnvironment`` (no attribute of Python's
internals is reachable: ``{{ lipsum.__globals__ }}`` is refused) with ``StrictUndefined`` (a placeholder
without a value is an error, never an empty string). Results are bounded: a string or list made by ``*``,
a power and the whole output are capped, so ``{{ 'x' * 10**12 }}`` fails at once instead of eating the
machine. Every failure is one ``JobFileError`` line naming the template's line.
"""

from __future__ import annotations

import contextlib
import json
import operator
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from torchjob.api.documents import MAX_INPUT_BYTES, read_text
from torchjob.api.errors import JobFileError

if TYPE_CHECKING:
    from jinja2.sandbox import SandboxedEnvironment

_TEMPLATE_FILE = "<job template>"
_TIME_BUDGET_SECONDS = 0.25
_MAX_EXPONENT_BITS = 4096
_PLACEHOLDER = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)


def placeholder_line(text: str) -> int | None:
    """The line of the first Jinja2 placeholder (``{{ x }}`` or ``{% ... %}``) left in ``text``, if any."""
    found = _PLACEHOLDER.search(text)
    return None if found is None else text.count("\n", 0, found.start()) + 1


def read_values(path: str) -> dict[str, Any]:
    """The placeholder values in the JSON file at ``path``."""
    text = read_text(path)
    try:
        values = json.loads(text)
    except ValueError as err:
        raise JobFileError(f"{path}: not valid JSON ({err})") from None
    except RecursionError:
        raise JobFileError(f"{path}: nested too deeply") from None
    if not isinstance(values, dict):
        raise JobFileError(f"{path}: expected a JSON object of placeholder values, got {type(values).__name__}")
    return values


def fill(text: str, source: str, values: dict[str, Any], values_source: str) -> str:
    """``text`` with its placeholders filled from ``values``."""
    # Imported here: most commands never fill a template, and Jinja2 takes a tenth of a second to import.
    import jinja2

    environment = _bounded_sandbox()(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)
    try:
        template = environment.from_string(text)
        template.name = template.filename = _TEMPLATE_FILE
        with _time_budget():
            result = template.render(values)
    except jinja2.TemplateSyntaxError as err:
        raise JobFileError(f"{source}: template error at line {err.lineno}: {err.message}") from None
    except jinja2.UndefinedError as err:
        where = _template_line(err.__traceback__)
        raise JobFileError(f"{source}:{where} {err.message}; give it in {values_source}") from None
    except _TooSlow as err:
        raise JobFileError(f"{source}:{_template_line(err.__traceback__)} template refused: {err}") from None
    except Exception as err:  # noqa: BLE001 - a template's expression can raise anything; each is one line
        where = _template_line(err.__traceback__)
        kind = "template refused" if isinstance(err, jinja2.exceptions.SecurityError) else "template failed"
        raise JobFileError(f"{source}:{where} {kind}: {type(err).__name__}: {err}") from None
    if len(result) > MAX_INPUT_BYTES:
        raise JobFileError(f"{source}: the filled template is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB")
    return result


class _TooSlow(Exception):
    def __str__(self) -> str:
        return f"rendering took longer than {_TIME_BUDGET_SECONDS:g}s (a loop too large?)"


@contextlib.contextmanager
def _time_budget() -> Iterator[None]:
    """Abort rendering that runs past the budget (only where signals can be used: the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, _TIME_BUDGET_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _template_line(tb: TracebackType | None) -> str:
    """`` line N:`` for the template line where rendering failed (Jinja2 maps its frames to template lines)."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _TEMPLATE_FILE:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" line {line}:" if line is not None else ""


def _bounded_sandbox() -> type[SandboxedEnvironment]:
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    class BoundedSandbox(SandboxedEnvironment):
        """A sandbox whose ``*`` and ``**`` cannot build values larger than a job file may be."""

        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
            if operator_name == "**":
                if (
                    isinstance(left, int)
                    and isinstance(right, int)
                    and right * max(abs(left), 2).bit_length() > (_MAX_EXPONENT_BITS)
                ):
                    raise jinja2.exceptions.SecurityError(f"{left} ** {right} is too large")
                return operator.pow(left, right)
            for sequence, count in ((left, right), (right, left)):
                sized = isinstance(sequence, (str, list, tuple)) and isinstance(count, int)
                if sized and len(sequence) * count > MAX_INPUT_BYTES:
                    raise jinja2.exceptions.SecurityError("a value built with * is too large")
            return operator.mul(left, right)

    return BoundedSandbox


def read_filled(path: str, values_path: str | None) -> str:
    """The job file's text, its placeholders filled when ``values_path`` is given."""
    text = read_text(path)
    if values_path is None:
        return text
    return fill(text, _display(path), read_values(values_path), values_path)


def _display(path: str) -> str:
    return "standard input" if path == "-" else str(Path(path))
