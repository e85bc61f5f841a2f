"""A training process keeps the memory a step frees (torchjob.train.c_heap): init() sets glibc's malloc so that a
step's large tensors come back from the heap, where they were faulted in and zeroed anew every step."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from torchjob.train import c_heap

# A one-process group (no launcher's environment), then a "step" of 30 tensors of 28 MB, allocated and freed five
# times: the page faults each step takes, printed.
_STEPS = """
import resource, torch
from torchjob.train import init, shutdown
init()
def step():
    tensors = [torch.ones(7_000_000) for _ in range(30)]
    return sum(float(t[0]) for t in tensors)
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 5)
shutdown(exit_code=0)
"""


def _faults_per_step(**env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_")) and k != c_heap.ENV_KEEP}
    done = subprocess.run(
        [sys.executable, "-c", _STEPS], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc is what is set")
def test_a_step_s_tensors_come_back_from_the_heap_after_init_and_not_where_the_owner_said_no() -> None:
    kept = _faults_per_step()
    handed_back = _faults_per_step(**{c_heap.ENV_KEEP: "0"})
    # 840 MB freed and allocated again a step: ~205k faults of 4 kB pages handed back, a few thousand kept.
    assert handed_back > 100_000
    assert kept * 10 < handed_back
    assert _faults_per_step(MALLOC_TRIM_THRESHOLD_="131072") > 100_000  # glibc's own setting, the owner's choice


def test_an_owner_s_malloc_settings_or_no_are_left_alone() -> None:
    assert not c_heap.chosen_elsewhere({})
    assert not c_heap.chosen_elsewhere({"MALLOC_ARENA_MAX": "2"})  # says nothing of what is handed back
    assert c_heap.chosen_elsewhere({"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert c_heap.chosen_elsewhere({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"})
    assert not c_heap.chosen_elsewhere({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    assert c_heap.chosen_elsewhere({c_heap.ENV_KEEP: "0"})
    assert not c_heap.keep_freed_memory({c_heap.ENV_KEEP: "false"})
