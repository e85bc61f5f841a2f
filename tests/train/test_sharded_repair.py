"""What a sharded group under in-place repair can and cannot be made whole from (sharded_in_place.py): which
survivors send a joiner its shard, and the layouts refused before training starts. The repair itself runs in
real processes in tests/integration/test_gpt_example.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchjob import worker_files
from torchjob.train import ShardingError
from torchjob.train.context import DistContext
from torchjob.train.shard_copies import CopyError, Holding, agree, keeper_of, neighbours
from torchjob.train.sharded_in_place import ShardedRepairError, ShardedState, _agreed, _senders
from torchjob.train.state_transfer import said


def test_a_joiner_gets_its_shard_from_every_survivor_holding_it() -> None:
    # 3 replica groups of 2: ranks 1, 3 and 5 hold shard 1. Rank 3 lost: ranks 1 and 5 each send part of it.
    holders = {0: 7, 1: 7, 2: 7, 4: 7, 5: 7}
    assert _senders(holders, world=6, shards=2) == {3: [1, 5]}
    assert said({3: [1, 5]}, "shard") == "rank 3's shard from ranks 1, 5"
    assert said({}, "shard") == "every rank kept its shard"  # a re-form by agreement: nobody was lost


def test_two_joiners_of_different_shards_each_get_their_own() -> None:
    assert _senders({0: 3, 3: 3}, world=4, shards=2) == {1: [3], 2: [0]}


def test_a_shard_whose_every_copy_was_lost_is_one_clear_error() -> None:
    with pytest.raises(ShardedRepairError, match=r"no survivor holds shard 1 \(every replica group lost that rank"):
        _senders({0: 3, 2: 3}, world=4, shards=2)


def test_a_survivor_a_step_ahead_of_its_peers_takes_its_shard_as_of_theirs() -> None:
    # HSDP 2 x 2 (shards 0 and 1), rank 3 lost: rank 0 completed step 61, which ranks 1 and 2 failed. Shard 1 is
    # held only at step 60 (by rank 1), so the group goes on from 60, and rank 0 takes shard 0 from rank 2.
    holders, step = _agreed({0: 61, 1: 60, 2: 60}, shards=2)
    assert (holders, step) == ({1: 60, 2: 60}, 60)
    assert _senders(holders, world=4, shards=2) == {0: [2], 3: [1]}
    # Where every shard is held at the newer step, a survivor behind takes its shard as of it.
    assert _agreed({0: 61, 1: 61, 2: 60}, shards=2) == ({0: 61, 1: 61}, 61)
    assert _agreed({0: 7, 1: 7, 2: 7}, shards=2) == ({0: 7, 1: 7, 2: 7}, 7)


def test_survivors_with_no_step_that_holds_every_shard_are_one_clear_error() -> None:
    with pytest.raises(ShardedRepairError, match=r"stopped at different steps \(60, 61\) and no step has every shard"):
        _agreed({0: 61, 1: 60}, shards=2)
    with pytest.raises(ShardedRepairError, match="no member of the re-formed group holds its shard"):
        _agreed({}, shards=2)
    with pytest.raises(ShardedRepairError, match=r"no survivor holds shard 1 \(every replica group lost that rank"):
        _agreed({0: 9, 2: 9}, shards=2)  # ranks 1 and 3 lost together


def _group(*holdings: tuple[int, ...]) -> dict[int, Holding]:
    """Each rank's (live step, own kept shard's step, copy's step, step of the copy it was receiving)."""
    return {rank: Holding(*steps) for rank, steps in enumerate(holdings)}


LOST = (-1, -1, -1, -1)  # a joiner


def _agree(*holdings: tuple[int, ...], per_replica: int = 1) -> tuple[int, dict[int, int]]:
    """``agree`` over a group of one rank's holdings each, its replicas of ``per_replica`` ranks."""
    return agree(_group(*holdings), world=len(holdings), per_replica=per_replica)


def test_under_plain_fsdp_a_joiner_gets_its_shard_from_the_neighbour_keeping_its_copy() -> None:
    # 4 ranks, each keeping a copy of its left neighbour's shard: rank 1's is with rank 2, rank 3's with rank 0.
    at_9 = (9, 9, 9, -1)
    assert _agree(at_9, LOST, at_9, at_9) == (9, {1: 2})
    assert _agree(at_9, at_9, at_9, LOST) == (9, {3: 0})
    assert _agree(at_9, LOST, at_9, LOST) == (9, {1: 2, 3: 0})
    both = "rank 1's shard from rank 2's copy; rank 3's shard from rank 0's copy"
    assert said({1: [2], 3: [0]}, "shard", copies=True) == both


def test_a_copy_is_kept_on_another_replica_so_a_replica_lost_whole_loses_no_shard() -> None:
    # Two replicas (Pods) of two ranks each, ranks 0, 1 and 2, 3: rank r's copy is kept one replica over, by r + 2.
    assert [keeper_of(rank, 4, 2) for rank in range(4)] == [2, 3, 0, 1]
    at_9 = (9, 9, 9, -1)
    assert _agree(at_9, at_9, LOST, LOST, per_replica=2) == (9, {2: 0, 3: 1})
    assert _agree(LOST, LOST, at_9, at_9, per_replica=2) == (9, {0: 2, 1: 3})
    # Each rank sends to its keeper and receives from the rank it keeps for, every rank keeping one copy, on
    # another replica, at any width whose replicas are alike.
    for world, per_replica in ((8, 4), (12, 4), (6, 2), (6, 3), (16, 8), (4, 2)):
        keepers = [keeper_of(rank, world, per_replica) for rank in range(world)]
        assert sorted(keepers) == list(range(world)), keepers
        assert all(keeper // per_replica != rank // per_replica for rank, keeper in enumerate(keepers)), keepers
        for rank in range(world):
            ctx = DistContext(
                rank, rank % per_replica, world, torch.device("cpu"), "gloo", "torchjob", local_world_size=per_replica
            )
            assert neighbours(ctx) == (keepers[rank], keepers.index(rank))
    # One replica, or a rank per replica: the next rank (no other replica to keep it on).
    assert [keeper_of(rank, 4, 4) for rank in range(4)] == [1, 2, 3, 0]
    assert [keeper_of(rank, 3, 1) for rank in range(3)] == [1, 2, 0]
    with pytest.raises(CopyError, match="rank 2, which kept its copy, was lost with it"):
        _agree(at_9, LOST, LOST, at_9)  # ranks 1 and 2 of one replica each


def test_a_rank_lost_before_its_newest_copy_was_whole_takes_the_group_back_a_step() -> None:
    # Rank 1 died while it sent its shard of step 9: rank 2 holds its copy of step 8, and every survivor its own.
    assert _agree((9, 8, 8, -1), LOST, (9, 8, 8, -1), (9, 8, 8, 9)) == (8, {1: 2})
    # Every copy of step 9 was received, but the last all-reduce failed: step 9, from the copy just received.
    assert _agree((9, 8, 8, 9), LOST, (9, 8, 8, 9), (9, 8, 8, 9)) == (9, {1: 2})
    # A survivor that completed a step its peers failed goes back to the step they hold.
    assert _agree((10, 9, 9, -1), LOST, (9, 9, 9, -1), (9, 9, 9, -1)) == (9, {1: 2})


def test_replayed_copies_step_on_where_a_peer_stepped_and_never_go_back() -> None:
    # (live, own, copy, received, ahead): replayed copies keep no shard of their own (replayed_copies.py).
    # Rank 1 died in the exchange of step 10's gradients after every rank had received (rank 0 was past the
    # all-reduce): rank 2 holds rank 1's gradients, rank 3 had not stepped and steps on with its own.
    assert _agree((10, -1, 10, -1, -1), LOST, (9, -1, 9, 10, 10), (9, -1, 9, 10, 10)) == (10, {1: 2})
    # Where no rank was past it, the group steps on as well when every gradient of the step is held...
    assert _agree((9, -1, 9, 10, 10), LOST, (9, -1, 9, 10, 10), (9, -1, 9, 10, 10)) == (10, {1: 2})
    # ... and carries on from the step before when rank 1's keeper had not received all of them.
    assert _agree((9, -1, 9, 10, 10), LOST, (9, -1, 9, -1, -1), (9, -1, 9, 10, 10)) == (9, {1: 2})
    # A survivor whose step made optimizer state steps on with no one (it holds no step ahead): no step is common.
    with pytest.raises(CopyError, match="no step that every survivor holds"):
        _agree((10, -1, 10, -1, -1), LOST, (9, -1, 9, 10, 10), (9, -1, 9, 10, -1))


def test_a_copy_lost_with_its_rank_or_of_no_common_step_is_one_clear_error() -> None:
    with pytest.raises(
        CopyError, match=r"no survivor holds rank 1's shard: rank 2, which kept its copy, was lost with"
    ):
        _agree((9, 9, 9, -1), LOST, LOST, (9, 9, 9, -1))
    with pytest.raises(
        CopyError, match=r"no step that every survivor holds and the lost ranks' copies are of \(rank 0"
    ):
        _agree((9, 9, 9, -1), LOST, (9, 9, 7, -1), (9, 9, 9, -1))


def _ctx(world: int) -> DistContext:
    return DistContext(0, 0, world, torch.device("cpu"), "gloo", "torchjob")


def _never_built() -> nn.Module:
    raise AssertionError("a refused layout builds nothing")


@pytest.mark.parametrize(
    ("replicas", "world", "said"),
    [
        (0, 4, r"replicas=0: HSDP needs a number of replica groups that divides the world size \(4\)"),
        (3, 4, r"replicas=3: HSDP needs a number of replica groups that divides the world size \(4\)"),
    ],
)
def test_a_layout_the_world_size_does_not_divide_into_is_refused_before_anything_is_built(
    replicas: int, world: int, said: str
) -> None:
    with pytest.raises(ShardingError, match=said):
        ShardedState(_ctx(world), _never_built, lambda m: torch.optim.SGD(m.parameters()), replicas)


def test_a_copy_interval_below_one_step_is_refused() -> None:
    with pytest.raises(ShardingError, match=r"copy_every=0; expected a number of steps >= 1"):
        ShardedState(_ctx(4), _never_built, lambda m: torch.optim.SGD(m.parameters()), 1, copy_every=0)


def test_an_elastic_group_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(worker_files.ENV_ELASTIC, "1")
    with pytest.raises(ShardingError, match="an elastic group changes its size"):
        ShardedState(_ctx(4), _never_built, lambda m: torch.optim.SGD(m.parameters()), 2)
