"""A waiting spare grows its heap to the size a member said through the job's store (torchjob.train.warm_heap), so that
what it allocates once given a place comes from pages already there. Each case runs in a process of its own (a
clean heap), with a real TCPStore; read as the process's resident memory, its heap's size, and the page faults of
allocating and writing 200 MB after the warming."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from torchjob.train import c_heap, warm_heap

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc is what is warmed")

# A member (this process first) tells its heap's size; the "spare" then grows its own 400 MB past what it has, a
# slice at a time as wait_as_spare does, and allocates 200 MB in blocks malloc serves from the heap.
_SPARE = """
import ctypes, json, resource, sys
from datetime import timedelta
import torch.distributed as dist
from torchjob.train import c_heap, warm_heap
c_heap.keep_freed_memory()
store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30))
told = warm_heap.tell(store, 0)
target = (warm_heap.heap_bytes() or 0) + 400 * 2**20
if told is not None:
    store.set("torchjob/heap-bytes/0", str(target))
def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096
before = resident()
spare = warm_heap.SpareHeap(lambda: warm_heap.told(store, 0))
slices = 0
while spare.warm_a_slice() > 0:
    slices += 1
spare.stop()
warmed = resident() - before
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
blocks = [libc.malloc(8 * 2**20) for _ in range(25)]
for block in blocks:
    ctypes.memset(block, 1, 8 * 2**20)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({"told": told, "target": target, "heap": warm_heap.heap_bytes(), "warmed": warmed,
                  "slices": slices, "faults": faults}))
"""


def _spare(**env: str) -> dict[str, int]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    clean = {k: v for k, v in clean.items() if k not in (c_heap.ENV_KEEP, warm_heap.ENV_WARM)}
    done = subprocess.run(
        [sys.executable, "-c", _SPARE], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found: dict[str, int] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_a_spare_grows_its_heap_to_a_member_s_size_in_slices_and_its_next_allocations_fault_no_pages() -> None:
    found = _spare()
    assert found["told"] is not None and found["told"] > 0  # the member's own heap, said under the attempt's key
    assert found["heap"] >= found["target"]
    assert found["warmed"] > 350 * 2**20  # written, so resident: faulted in while waiting
    assert found["slices"] >= 2  # 400 MB in slices of 64 MB: it looked for its place in between
    # 200 MB = 51,200 pages: from the warmed heap, (almost) none faulted in now.
    assert found["faults"] < 2_000, found


def test_a_spare_leaves_its_heap_alone_where_the_owner_said_no_or_the_heap_is_not_kept() -> None:
    for env in ({warm_heap.ENV_WARM: "0"}, {c_heap.ENV_KEEP: "0"}, {"MALLOC_TRIM_THRESHOLD_": "131072"}):
        found = _spare(**env)
        assert found["slices"] == 0, env
        assert found["warmed"] < 100 * 2**20, env
        assert found["faults"] > 40_000, env  # 200 MB faulted in as it is written
