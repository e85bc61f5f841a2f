"""Where a process stands in its training group: rank, world size, device, backend, and (under in-place repair)
the group's generation. A leaf module: ``init`` makes one, and so does a spare that joins a running group
(``generations``), without either importing the other for it."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str
    launcher: str
    # In-place repair (torchjob.train.in_place): the group's generation, whether this process joined a
    # running group as a spare (it then takes its state from the survivors), and the lowest rank that said, as
    # the generation formed, that it holds the training state (None where no generation was formed so).
    generation: int = 0
    joined: bool = False
    holder: int | None = None
    # How many ranks this rank's replica runs (its Pod, or its machine under torchrun: LOCAL_WORLD_SIZE), numbered
    # one after another: a neighbour's copy of a shard is kept on another replica (shard_copies.py).
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def log(self, message: str) -> None:
        """Print on rank 0 only, prefixed like the ranks' own lines."""
        if self.is_main:
            print(f"Rank 0: {message}", flush=True)
