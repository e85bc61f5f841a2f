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
from torchjob.train.sharded_in_place import ShardedRepairError, ShardedState, _said, _senders


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


def _ctx(world: int) -> DistContext:
    return DistContext(0, 0, world, torch.device("cpu"), "gloo", "torchjob")


def _never_built() -> nn.Module:
    raise AssertionError("a refused layout builds nothing")


@pytest.mark.parametrize(
    ("replicas", "world", "said"),
    [
        (1, 4, r"replicas=1; a lost rank's shard must live on in another replica group, so repair in place needs"),
        (3, 4, r"replicas=3: HSDP needs a number of replica groups that divides the world size \(4\)"),
    ],
)
def test_a_layout_with_no_copy_of_each_shard_is_refused_before_anything_is_built(
    replicas: int, world: int, said: str
) -> None:
    with pytest.raises(ShardingError, match=said):
        ShardedState(_ctx(world), _never_built, lambda m: torch.optim.SGD(m.parameters()), replicas)


def test_an_elastic_group_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(worker_files.ENV_ELASTIC, "1")
    with pytest.raises(ShardingError, match="an elastic group changes its size"):
        ShardedState(_ctx(4), _never_built, lambda m: torch.optim.SGD(m.parameters()), 2)
