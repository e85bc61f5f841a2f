"""The corpus of invalid inputs (tests/data/invalid): where it is and how each file says what it expects.

Each file starts with ``# expect: TEXT`` (``{corpus}`` in TEXT stands for the corpus folder) and may have
``# args: ...`` next. Free of pytest, so ``bench/refusals.py`` reads the corpus the same way the tests do.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.support.paths import DATA

INVALID_CORPUS = DATA / "invalid"


def corpus_case(path: Path) -> tuple[str, list[str]]:
    """The line an invalid input must print and the arguments it is given, file arguments resolved against
    the corpus folder."""
    lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    assert lines[0].startswith("# expect: "), f"{path.name} must start with '# expect: ...'"
    expected = lines[0].removeprefix("# expect: ").replace("{corpus}", str(INVALID_CORPUS))
    args = lines[1].removeprefix("# args: ") if len(lines) > 1 and lines[1].startswith("# args: ") else ""
    resolved = [str(INVALID_CORPUS / a) if (INVALID_CORPUS / a).is_file() else a for a in shlex.split(args)]
    return expected, resolved
