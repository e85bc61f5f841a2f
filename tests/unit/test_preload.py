"""What a warm interpreter imports before it forks (launch/preload.py): the list, and the collector's state after."""

from __future__ import annotations

import gc

import pytest

from torchjob.launch import preload


def test_a_jobs_own_preloads_follow_torchs_without_repeats() -> None:
    assert preload.with_extra(("torch", "torch.optim"), " numpy, torch ,,pandas") == [
        "torch",
        "torch.optim",
        "numpy",
        "pandas",
    ]


@pytest.mark.parametrize("collecting", [True, False])
def test_the_preload_leaves_the_collector_as_it_found_it_and_names_what_failed(collecting: bool) -> None:
    (gc.enable if collecting else gc.disable)()
    try:
        failed = preload.preload(["json", "no_such_module_here"])
        assert gc.isenabled() is collecting
        assert failed == ["no_such_module_here"]
    finally:
        gc.enable()
        gc.unfreeze()  # the preload froze this test process's objects, as a warm interpreter's own
