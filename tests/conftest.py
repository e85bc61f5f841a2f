"""Shared test helpers: paths of the test data, and a CLI runner against a private state directory."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
INVALID_CORPUS = DATA / "invalid"


def corpus_case(path: Path) -> tuple[str, list[str]]:
    """The line an invalid input must print (``# expect: ...``) and the arguments it is given (``# args:``),
    with file arguments resolved against the corpus folder."""
    lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    assert lines[0].startswith("# expect: "), f"{path.name} must start with '# expect: ...'"
    expected = lines[0].removeprefix("# expect: ").replace("{corpus}", str(INVALID_CORPUS))
    args = lines[1].removeprefix("# args: ") if len(lines) > 1 and lines[1].startswith("# args: ") else ""
    resolved = [str(INVALID_CORPUS / a) if (INVALID_CORPUS / a).is_file() else a for a in shlex.split(args)]
    return expected, resolved


@pytest.fixture
def torchjob_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("TORCHJOB_HOME", str(home))
    yield home


def run_cli(*args: str, home: Path, timeout: float = 300, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``torchjob ARGS`` as a user would, in its own process."""
    env = {**os.environ, "TORCHJOB_HOME": str(home)}
    return subprocess.run(  # type: ignore[call-overload,no-any-return]
        [sys.executable, "-m", "torchjob.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kwargs,
    )
