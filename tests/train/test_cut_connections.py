"""Leaving a collective by cutting the old group's connections (torchjob.train.peers), with real gloo groups: a
send that the collective posts just after the cut must not wait out the group's timeout."""

from __future__ import annotations

from tests.support.ranks import spawn_ranks

# Shutting both halves of the connections made 1 in 8 to 1 in 15 such sends wait: 40 trials catch that with ~95% odds.
_TRIALS = 40


def test_a_send_posted_just_after_the_cut_completes_or_raises_at_once() -> None:
    ranks = spawn_ranks("cut_then_send.py", 2, str(_TRIALS), timeout=240)
    said = ranks[0].stdout
    assert [r.returncode for r in ranks] == [0, 0], said + ranks[1].stdout
    assert said.count("TRIAL ") == _TRIALS, said
