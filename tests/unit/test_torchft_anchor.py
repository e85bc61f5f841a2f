"""How the torchft anchor's survivors are timed (bench/torchft_runs.py): to their first step without the killed group,
as torchjob's are, not to the step they had in flight when it died."""

from bench.torchft_runs import first_in_new_quorum

KILL = 100.0


def _commit(at: float, quorum: int | None, participants: int) -> dict[str, object]:
    record: dict[str, object] = {"step": int(at * 10), "time": at, "participants": participants}
    if quorum is not None:
        record["quorum"] = quorum
    return record


def test_the_step_in_flight_committed_in_the_old_quorum_is_not_the_survivors_going_on() -> None:
    records = [
        _commit(99.9, 4, 3),
        _commit(100.01, 4, 3),  # in flight: the killed group had sent its gradients
        _commit(100.04, 4, 3),
        _commit(101.1, 5, 2),  # the smaller quorum, formed after the Lighthouse's join time-out
        _commit(107.0, 6, 3),  # the replacement back
    ]
    assert round(first_in_new_quorum(records, KILL, groups=3) or 0, 2) == 1.1


def test_a_new_quorum_that_already_holds_the_replacement_counts() -> None:
    records = [_commit(99.9, 4, 3), _commit(100.02, 4, 3), _commit(107.0, 5, 3)]
    assert round(first_in_new_quorum(records, KILL, groups=3) or 0, 2) == 7.0


def test_records_without_a_quorum_number_fall_back_to_a_smaller_quorum() -> None:
    records = [_commit(99.9, None, 3), _commit(100.02, None, 3), _commit(101.2, None, 2)]
    assert round(first_in_new_quorum(records, KILL, groups=3) or 0, 2) == 1.2


def test_no_step_after_the_kill_is_none() -> None:
    assert first_in_new_quorum([_commit(99.9, 4, 3), _commit(100.03, 4, 3)], KILL, groups=3) is None
