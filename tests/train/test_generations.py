"""Leaving a generation's group: torch's registry lets go of it at once, and its connections close in the
background (gloo's destructor waits on its event loop, peer by peer)."""

from __future__ import annotations

import weakref

import torch.distributed as dist

from tests.support.waits import wait_for
from torchjob.train import generations


def test_a_left_group_is_out_of_torchs_registry_at_once_and_freed_soon_after() -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    group = weakref.ref(dist.distributed_c10d._get_default_group())
    generations.leave_group("gloo", 0, broken=True)
    assert not dist.is_initialized()  # the next generation's group can be made now
    wait_for(lambda: group() is None, timeout=30, what="the old group freed")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    dist.destroy_process_group()
