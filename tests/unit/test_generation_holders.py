"""Which member of a forming generation sends the training state: the lowest rank that said, at the store, that it
holds it (train/generations.py), read once everyone has arrived; a joiner says nothing, even one whose rank is 0."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from torchjob.train import generations
from torchjob.train.channel import FileChannel

TIMEOUT = timedelta(seconds=20)


def formed(tmp_path: Path, world: int, holding: set[int]) -> dict[int, int]:
    """``world`` members arrive at once, in threads, at one real store; ``holding`` say they hold the state.
    What each of them reads as the lowest holder."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=TIMEOUT)  # type: ignore[attr-defined]
    found: Any = {"attempt": 0, "generation": 3, "members": [], "joined": []}
    talk = FileChannel(str(tmp_path))
    seen: dict[int, int] = {}

    def member(rank: int) -> None:
        client = dist.TCPStore("127.0.0.1", store.port, is_master=False, timeout=TIMEOUT)  # type: ignore[attr-defined]
        assert generations.everyone_arrived(talk, found, world, client, TIMEOUT, rank if rank in holding else None)
        seen[rank] = generations.lowest_holder(found, world, client)

    threads = [threading.Thread(target=member, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return seen


@pytest.mark.parametrize(("holding", "lowest"), [({0, 1, 2, 3}, 0), ({1, 3}, 1), ({3}, 3), (set(), 4)])
def test_every_member_reads_the_same_lowest_holder(tmp_path: Path, holding: set[int], lowest: int) -> None:
    """Rank 0 a joiner ({1, 3}: a spare took the lost rank 0's place); nobody holding it reads as the world size,
    which the restore refuses."""
    assert formed(tmp_path, 4, holding) == {rank: lowest for rank in range(4)}
