"""A training process keeps the memory a step frees (torchjob.train.c_heap): init() sets glibc's malloc so that a
step's large tensors come back from the heap, where they were handed back to the kernel and faulted in and zeroed
anew every step. Read as the memory the process still holds once a step's tensors are freed (page faults, the cost
itself, vary with the kernel's huge pages)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from torchjob.train import c_heap

# A one-process group (no launcher's environment), then a "step": 30 tensors of 28 MB allocated, written and freed.
# Printed: how much of it the process still holds once it is freed (MB), the memory the next step's come from.
_STEP = """
import torch
from torchjob.train import init, shutdown
def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 1e6
init()
before = resident()
tensors = [torch.ones(7_000_000) for _ in range(30)]
del tensors
print(resident() - before)
shutdown(exit_code=0)
"""


def _held_after_a_step(**env: str) -> float:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_")) and k != c_heap.ENV_KEEP}
    done = subprocess.run(
        [sys.executable, "-c", _STEP], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc is what is set")
def test_a_step_s_tensors_are_kept_for_the_next_after_init_and_not_where_the_owner_said_no() -> None:
    # 840 MB freed: kept in the heap (faulted in once), or handed back to the kernel (faulted in again next step).
    assert _held_after_a_step() > 700
    assert _held_after_a_step(**{c_heap.ENV_KEEP: "0"}) < 200
    assert _held_after_a_step(MALLOC_TRIM_THRESHOLD_="131072") < 200  # glibc's own setting: the owner's choice


def test_an_owner_s_malloc_settings_or_no_are_left_alone() -> None:
    assert not c_heap.chosen_elsewhere({})
    assert not c_heap.chosen_elsewhere({"MALLOC_ARENA_MAX": "2"})  # says nothing of what is handed back
    assert c_heap.chosen_elsewhere({"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert c_heap.chosen_elsewhere({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"})
    assert not c_heap.chosen_elsewhere({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    assert c_heap.chosen_elsewhere({c_heap.ENV_KEEP: "0"})
    assert not c_heap.keep_freed_memory({c_heap.ENV_KEEP: "false"})
