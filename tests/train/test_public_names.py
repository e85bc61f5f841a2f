"""The names users' scripts import from ``torchjob.train`` keep importing, under their first names too."""

from __future__ import annotations

import importlib

import torchjob.train
from torchjob.train.in_place import InPlaceTraining


def test_every_name_the_package_exports_is_there() -> None:
    missing = [name for name in torchjob.train.__all__ if not hasattr(torchjob.train, name)]
    assert missing == []


def test_the_in_place_loop_still_imports_under_its_first_name() -> None:
    first_name = importlib.import_module("torchjob.train.inplace")
    assert first_name.InPlaceTraining is InPlaceTraining
    assert first_name.__all__ == ["InPlaceTraining"]
