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


def test_a_sharded_model_on_a_gpu_under_gloo_is_refused_before_any_collective() -> None:
    # Ranks sharing a GPU train over gloo (torchjob.train.devices); FSDP2 there killed every rank (SIGSEGV).
    sharing = DistContext(0, 0, 2, torch.device("cuda", 0), "gloo", "torchjob")
    with pytest.raises(ShardingError, match=r"a sharded model on cuda:0 needs NCCL, and this group has 'gloo'"):
        build_sharded(lambda: nn.Sequential(nn.Linear(4, 4)), sharing)
