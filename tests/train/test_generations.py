"""Leaving a generation's group: torch's registry lets go of it at once, and its connections close in the
background (gloo's destructor waits on its event loop, peer by peer), and a process that ends meanwhile waits
for that close before it ends. A heap frozen before the model (freeze_heap) still lets a group held by a reference
cycle go, and is not frozen once Triton is loaded (whose bindings would report what stays alive at exit)."""

from __future__ import annotations

import subprocess
import sys
import weakref

import pytest
import torch.distributed as dist

from tests.support.ranks import spawn_ranks
from tests.support.waits import wait_until
from torchjob.train import generations


def test_a_left_group_is_out_of_torchs_registry_at_once_and_freed_soon_after() -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    group = weakref.ref(dist.distributed_c10d._get_default_group())
    generations.leave_group("gloo", 0, broken=True)
    assert not dist.is_initialized()  # the next generation's group can be made now
    wait_until(lambda: group() is None, timeout=30, what="the old group freed")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    dist.destroy_process_group()


# Before exit waited for the close, 17 of 20 such groups had a rank die of SIGABRT: 3 groups catch it.
_GROUPS = 3


def test_a_process_that_ends_just_after_leaving_its_group_ends_with_code_0() -> None:
    for _ in range(_GROUPS):
        ranks = spawn_ranks("leave_then_exit.py", 3, timeout=120)
        said = "".join(rank.stdout for rank in ranks)
        assert [rank.returncode for rank in ranks] == [0, 0, 0], said
        assert said.count("LEFT") == 3, said


_HELD_BY_A_CYCLE = """
import gc, time, weakref
import torch.distributed as dist
from torchjob.train import generations
generations.freeze_heap()
print("FROZEN", gc.get_freeze_count() > 0)
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
group = weakref.ref(dist.distributed_c10d._get_default_group())
cycle = [dist.distributed_c10d._get_default_group()]
cycle.append(cycle)  # as a sharded model (FSDP2's hooks) holds its group
del cycle
generations.leave_group("gloo", 0, broken=True)
deadline = time.monotonic() + 30
while group() is not None and time.monotonic() < deadline:
    time.sleep(0.05)
print("FREED" if group() is None else "HELD")
"""


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a process of its own: a frozen heap is the whole process's."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_a_group_held_by_a_cycle_made_after_the_heap_was_frozen_is_still_let_go() -> None:
    done = _python(_HELD_BY_A_CYCLE)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["FROZEN", "True", "FREED"], done.stdout + done.stderr[-3000:]


def test_the_heap_is_not_frozen_once_triton_is_loaded_and_nothing_is_reported_leaked_at_exit() -> None:
    pytest.importorskip("triton")
    code = (
        "import gc, sys, torch._dynamo\n"
        "from torchjob.train import generations\n"
        "generations.freeze_heap()\n"
        "print('triton' in sys.modules, gc.get_freeze_count())\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "0"], done.stdout
    assert "leaked" not in done.stderr, done.stderr[-3000:]
