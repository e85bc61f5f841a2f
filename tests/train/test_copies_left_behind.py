"""Waits left behind once cut (peers.done_or_left: the neighbours' copies, a sharded collective's sends): a member
whose wait gloo never wakes (a send queued when its peer left the step) still leaves the step once its connections
are cut, as a failed step does; a wait's own error is raised where it was waited for."""

from __future__ import annotations

import threading

import pytest
import torch

from torchjob.train import peers


def test_an_exchange_that_ends_returns_and_one_that_fails_raises_its_own_error() -> None:
    happened: list[int] = []
    peers.done_or_left(lambda: happened.append(1), torch.device("cpu"), "the test's wait was")
    assert happened == [1]

    def fails() -> None:
        raise RuntimeError("Connection closed by peer")

    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        peers.done_or_left(fails, torch.device("cpu"), "the test's wait was")


def test_an_exchange_stuck_after_the_connections_were_cut_is_left_behind_and_the_step_fails() -> None:
    never_woken = threading.Event()
    # The watching thread's cut (here of no connection: the cut itself is what wakes the waiting member), a moment in.
    cut = threading.Timer(0.2, lambda: peers.cut_group_connections(set(), only=set()))
    cut.start()
    try:
        with pytest.raises(RuntimeError, match="left behind: the group was repaired around a lost peer"):
            peers.done_or_left(never_woken.wait, torch.device("cpu"), "the test's wait was")
        assert peers._LEFT_BEHIND[-1].is_alive()
    finally:
        never_woken.set()
        cut.join()
    peers._LEFT_BEHIND[-1].join(5)


def test_an_exchange_that_ends_soon_after_a_cut_raises_its_own_error_not_left_behind() -> None:
    cut_seen = threading.Event()

    def fails_once_cut() -> None:
        cut_seen.wait()
        raise RuntimeError("Connection reset by peer")  # what gloo raises when it wakes the receive

    cut = threading.Timer(0.1, lambda: peers.cut_group_connections(set(), only=set()))
    cut.start()
    left_before = len(peers._LEFT_BEHIND)
    with peers.woken_by_cut(cut_seen), pytest.raises(RuntimeError, match="Connection reset by peer"):
        peers.done_or_left(fails_once_cut, torch.device("cpu"), "the test's wait was")
    cut.join()
    assert len(peers._LEFT_BEHIND) == left_before
