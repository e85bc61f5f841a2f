"""Shared test helpers: paths of the test data, and a CLI runner against a private state directory."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


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
