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
from torchjob.train.sharded_in_place import ShardedRepairError, ShardedState, _copy_senders, _said, _senders


def test_a_joiner_gets_its_shard_from_every_survivor_holding_it() -> None:
    # 3 replica groups of 2: ranks 1, 3 and 5 hold shard 1. Rank 3 lost: ranks 1 and 5 each send part of it.
    holders = {0: 7, 1: 7, 2: 7, 4: 7, 5: 7}
    assert _senders(holders, world=6, shards=2) == {3: [1, 5]}
    assert _said({3: [1, 5]}) == "rank 3's shard from ranks 1, 5"
    assert _said({}) == "every rank kept its shard"  # a re-form by agreement: nobody was lost


def test_two_joiners_of_different_shards_each_get_their_own() -> None:
    assert _senders({0: 3, 3: 3}, world=4, shards=2) == {1: [3], 2: [0]}


def test_a_shard_whose_every_copy_was_lost_is_one_clear_error() -> None:
    with pytest.raises(ShardedRepairError, match=r"no survivor holds shard 1 \(every replica group lost that rank"):
        _senders({0: 3, 2: 3}, world=4, shards=2)


def test_under_plain_fsdp_a_joiner_gets_its_shard_from_the_neighbour_keeping_its_copy() -> None:
    # 4 ranks, each keeping a copy of its left neighbour's shard: rank 1's is with rank 2, rank 3's with rank 0.
    assert _copy_senders({0: 9, 2: 9, 3: 9}, {0: 9, 2: 9, 3: 9}, world=4, step=9) == {1: [2]}
    assert _copy_senders({0: 9, 1: 9, 2: 9}, {0: 9, 1: 9, 2: 9}, world=4, step=9) == {3: [0]}
    assert _copy_senders({0: 9, 2: 9}, {0: 9, 2: 9}, world=4, step=9) == {1: [2], 3: [0]}
    assert (
        _said({1: [2], 3: [0]}, copies=True) == "rank 1's shard from rank 2's copy; rank 3's shard from rank 0's copy"
    )


@pytest.mark.parametrize(
    ("holders", "copies", "said"),
    [
        ({0: 9, 3: 9}, {0: 9, 3: 9}, r"no survivor holds rank 1's shard: rank 2, which kept its copy, was lost with"),
        ({0: 9, 2: 9, 3: 9}, {0: 9, 2: 8, 3: 9}, r"rank 2's copy of rank 1's shard is of step 8, the survivors are at"),
        ({0: 9, 2: 9, 3: 9}, {0: 9, 2: -1, 3: 9}, r"rank 2's copy of rank 1's shard was not whole, the survivors are"),
    ],
)
def test_a_copy_lost_or_a_step_behind_is_one_clear_error(
    holders: dict[int, int], copies: dict[int, int], said: str
) -> None:
    with pytest.raises(ShardedRepairError, match=said):
        _copy_senders(holders, copies, world=4, step=9)


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


def test_an_elastic_group_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(worker_files.ENV_ELASTIC, "1")
    with pytest.raises(ShardingError, match="an elastic group changes its size"):
        ShardedState(_ctx(4), _never_built, lambda m: torch.optim.SGD(m.parameters()), 2)
