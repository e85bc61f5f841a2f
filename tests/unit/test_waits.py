"""The scenario kit's one wait: it returns what came, names what never came, and stops at once where told."""

from __future__ import annotations

import itertools

import pytest

from tests.support.waits import wait_until


def test_it_returns_the_first_true_value_it_was_given() -> None:
    calls = itertools.count(1)
    assert wait_until(lambda: [n] if (n := next(calls)) == 3 else [], timeout=5, every=0.01) == [3]


def test_a_timeout_names_what_never_came_and_the_state_that_explains_it() -> None:
    with pytest.raises(AssertionError, match=r"timed out waiting for the spare: 2 Pods pending"):
        wait_until(lambda: False, timeout=0.05, what="the spare", every=0.01, detail=lambda: "2 Pods pending")


def test_an_outcome_that_ends_the_wait_fails_it_at_once() -> None:
    """A Pod that ended Failed while the test waits for Running: no use waiting out the timeout."""
    looks = itertools.count(1)

    def ended() -> str | None:
        return "pod p ended Failed" if next(looks) >= 2 else None

    with pytest.raises(AssertionError, match=r"^pod p ended Failed, waiting for pod p to be Running: its log$"):
        wait_until(
            lambda: False, timeout=60, what="pod p to be Running", every=0.01, detail=lambda: "its log", ended=ended
        )
    assert next(looks) == 3  # it looked twice, and stopped at the second
