"""Splitting data across ranks, and saying plainly what the batch size and learning rate really are.

Two scaling modes, stated up front because confusing them is the most common distributed-training mistake:
- ``strong``: the *global* batch is fixed; each rank gets ``global / world_size``. Same optimisation as one
  process with that batch; the learning rate stays.
- ``weak``: the *per-rank* batch is fixed; the effective batch grows with the world size. With
  ``scale_lr=True`` the learning rate follows the linear scaling rule (lr × effective / reference batch).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from torchjob.train.context import DistContext

Mode = Literal["strong", "weak"]


@dataclass(frozen=True)
class BatchPlan:
    mode: Mode
    world_size: int
    per_rank_batch: int
    effective_batch: int
    learning_rate: float

    @classmethod
    def create(
        cls,
        mode: Mode,
        batch_size: int,
        world_size: int,
        base_lr: float,
        scale_lr: bool = False,
        reference_batch: int | None = None,
    ) -> BatchPlan:
        """``batch_size`` is the global batch in ``strong`` mode and the per-rank batch in ``weak`` mode.

        ``reference_batch`` is the batch ``base_lr`` was tuned for (default: ``batch_size``).
        """
        if mode not in ("strong", "weak"):
            raise ValueError(f"scaling mode must be 'strong' or 'weak', got {mode!r}")
        if batch_size < 1 or world_size < 1:
            raise ValueError(f"batch size and world size must be positive, got {batch_size} and {world_size}")
        if mode == "strong":
            if batch_size % world_size:
                raise ValueError(
                    f"strong scaling: the global batch {batch_size} is not divisible by the world size {world_size}"
                )
            per_rank, effective = batch_size // world_size, batch_size
        else:
            per_rank, effective = batch_size, batch_size * world_size
        lr = base_lr * effective / (reference_batch or batch_size) if scale_lr else base_lr
        return cls(mode, world_size, per_rank, effective, lr)

    def describe(self) -> str:
        return (
            f"world size {self.world_size}, per-rank batch {self.per_rank_batch}, effective batch "
            f"{self.effective_batch} ({self.mode} scaling), learning rate {self.learning_rate:g}"
        )


class ResumableSampler(DistributedSampler[Any]):
    """DistributedSampler (same shards, same per-epoch reshuffle) that can resume mid-epoch.

    ``state_dict()`` records the epoch and how many samples this rank has taken; after
    ``load_state_dict()`` the current epoch continues exactly where it stopped, and later epochs are as
    if nothing had happened.
    """

    def __init__(self, dataset: Dataset[Any], ctx: DistContext, shuffle: bool = True, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=shuffle, seed=seed)
        self._skip = 0
        self.taken = 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self._skip = 0
        super().set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        skip, self._skip = self._skip, 0
        self.taken = skip
        for index in itertools.islice(super().__iter__(), skip, None):
            self.taken += 1
            yield index

    def __len__(self) -> int:
        return super().__len__() - self._skip

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "taken": self.taken}

    def load_state_dict(self, state: dict[str, int]) -> None:
        super().set_epoch(state["epoch"])
        self._skip = state["taken"]


def shard(
    dataset: Dataset[Any],
    plan: BatchPlan,
    ctx: DistContext,
    shuffle: bool = True,
    seed: int = 0,
    **loader_options: Any,
) -> DataLoader[Any]:
    """A DataLoader over this rank's shard, ``plan.per_rank_batch`` samples a step. Its sampler is
    ``loader.sampler`` (a ``ResumableSampler``): call ``set_epoch`` each epoch."""
    sampler = ResumableSampler(dataset, ctx, shuffle=shuffle, seed=seed)
    return DataLoader(dataset, batch_size=plan.per_rank_batch, sampler=sampler, **loader_options)
