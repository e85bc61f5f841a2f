"""build_sharded refuses, before it allocates or shards anything, a model it could not fill as build() would."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchjob.train import DistContext, ShardingError, build_sharded


class Scale(nn.Module):
    """A parameter of its own and no reset_parameters(): nothing can fill it as its constructor did."""

    def __init__(self) -> None:
        super().__init__()
        self.factor = nn.Parameter(torch.ones(1))


def _one_rank() -> DistContext:
    return DistContext(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend="gloo", launcher="none")


def test_a_module_with_parameters_and_no_reset_parameters_is_refused_by_its_name() -> None:
    with pytest.raises(ShardingError, match=r"module '1' holds parameters of its own but has no reset_parameters\(\)"):
        build_sharded(lambda: nn.Sequential(nn.Linear(4, 4), Scale()), _one_rank())
