"""A re-formed DDP group brings its joiners the whole state from every survivor at once, and sends nothing to the
members that hold it (group_state.ReplicatedState, state_transfer.py): the plan, and the transfer in real gloo
processes."""

from __future__ import annotations

import pytest

from tests.support.ranks import spawn_ranks
from torchjob.train.group_state import whole_state_senders


def test_a_joiner_gets_the_state_from_every_survivor() -> None:
    table = [(1, 7), (1, 7), (0, -1), (1, 7)]  # rank 2 is a spare taking a lost rank's place
    assert whole_state_senders(table, holder=0) == (0, 7, {2: [0, 1, 3]})


def test_a_survivor_a_step_ahead_takes_the_state_as_a_joiner_does() -> None:
    assert whole_state_senders([(1, 7), (1, 8), (0, -1)], holder=0) == (0, 7, {1: [0], 2: [0]})


def test_without_a_joiner_nothing_is_sent_and_without_a_holder_it_is_one_clear_error() -> None:
    assert whole_state_senders([(1, 3), (1, 3)], holder=None) == (0, 3, {})
    assert whole_state_senders([(0, -1), (1, 3)], holder=0) == (1, 3, {0: [1]})  # the store's holder did not hold it
    with pytest.raises(RuntimeError, match="no member of the repaired group holds the training state"):
        whole_state_senders([(0, -1), (0, -1)], holder=None)


def test_the_joiners_receive_the_weights_the_optimizer_state_and_the_learning_rate_of_the_group() -> None:
    ranks = spawn_ranks("whole_state_transfer.py", 4, timeout=120)
    said = "\n".join(r.stdout for r in ranks)
    assert [r.returncode for r in ranks] == [0, 0, 0, 0], said
    states = [line.split()[1:] for line in said.splitlines() if line.startswith("STATE ")]
    assert sorted(rank for rank, _, _ in states) == ["0", "1", "2", "3"], said
    assert {(step, digest) for _, step, digest in states} == {("3", states[0][2])}, said
    assert "SAID rank 2's state from ranks 0, 1; rank 3's state from ranks 0, 1" in said, said
    after = {line.split()[2] for line in said.splitlines() if line.startswith("AFTER ")}
    assert len(after) == 1, said
