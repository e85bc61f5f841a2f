"""The install is per checkout: the tests import this checkout's torchjob, from its own ./.venv."""

from __future__ import annotations

import sys
from pathlib import Path

import torchjob
from tests.support.paths import ROOT


def test_this_checkout_is_what_runs() -> None:
    assert Path(torchjob.__file__).resolve().is_relative_to(ROOT / "src")
    venv = ROOT / ".venv"
    assert venv.is_dir() and not venv.is_symlink()
    assert Path(sys.prefix).resolve() == venv.resolve()
