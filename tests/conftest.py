"""Fixtures every tier shares. What tests and benchmarks share besides is the scenario kit, ``tests/support``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def torchjob_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("TORCHJOB_HOME", str(home))
    yield home
