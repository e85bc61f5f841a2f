"""A warm spare's C heap: the memory a member's step uses, faulted in while the spare waits, not once it has a place.

A spare given a lost rank's place receives that rank's state and trains the retried step at once, in a process
that has never trained: every tensor it receives into and every buffer the step allocates is a page the kernel
faults in and zeroes there and then. In the 110M-parameter GPT example over 4 ranks (HSDP, gloo, 2 cores) that
was ~600k page faults and ~4.7 s of system time in the joiner's first step, against ~100k and ~0.8 s in a
member's steady step, while the whole group waited for it (``bench.state``; 7.5 µs a fault in this VM).

So a member says how large its C heap has grown (glibc's ``mallinfo2``: the bytes its arenas took from the
kernel, which ``c_heap`` keeps from one step to the next), once, after its first few steps, under a key of the
job's store; a waiting spare reads it and grows its own heap to that size: it allocates it in blocks malloc serves
from the heap, writes every page, and frees them, and since freed memory is kept (``c_heap``), the state it
receives and its first step's buffers then come from pages already there. Blocks that malloc maps on their own
(32 MB and over) are not kept by any process, so they cost every member at every step and are not warmed.

By hand (the same kill, the same example): the joiner's first step took 4.2-4.3 s (~85k page faults, a steady
step's) where it had taken 7.3-7.5 s, and the group's first step after the kill came at 4.9-5.0 s, not 8.0 s.

The cost: the spare holds that memory while it waits (what it would hold as a member anyway), and faults it in
once, at half a core's pace (2.3 GB here: ~4 s of a core, in a step or two of the group's while they share the
machine's cores). Not where the heap is not kept (``c_heap``: another C library, or its settings
chosen elsewhere), nor with ``TORCHJOB_WARM_SPARE_HEAP=0``.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from torchjob.train import c_heap

ENV_WARM = "TORCHJOB_WARM_SPARE_HEAP"
# The store key a member says its heap's size under, per attempt (a restarted group's heap is measured again).
_KEY = "torchjob/heap-bytes/{attempt}"
# A member says its heap's size after this many steps of its own: the first ones grow it, the later ones reuse it.
STEPS_BEFORE_TELLING = 3
# Blocks malloc serves from the heap (under c_heap's mmap threshold, 32 MB), large enough to be few.
_BLOCK = 8 * 2**20
# What a spare grows its heap by between two looks for its place (~0.1 s here: a place given while it grows is
# seen that much later).
SLICE = 64 * 2**20
# How often a waiting spare asks whether a member has said its heap's size.
ASK_SECONDS = 1.0


class _MallInfo2(ctypes.Structure):
    # glibc's struct mallinfo2 (malloc.h, glibc 2.33 and later): every field a size_t.
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


@functools.cache
def _libc() -> Any:
    """glibc (``c_heap.glibc``) with the functions this module calls typed; None without one, or before 2.33."""
    libc = c_heap.glibc()
    if libc is None:
        return None
    try:
        libc.mallinfo2.restype = _MallInfo2
    except AttributeError:  # a glibc older than 2.33
        return None
    libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
    libc.free.argtypes, libc.free.restype = [ctypes.c_void_p], None
    return libc


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether spares warm their heap: only where ``c_heap`` keeps freed memory, and not turned off."""
    if environ.get(ENV_WARM, "1").strip().lower() in ("0", "false", "no"):
        return False
    return not c_heap.chosen_elsewhere(environ) and _libc() is not None


def heap_bytes() -> int | None:
    """The bytes this process's malloc arenas took from the kernel (mapped blocks not counted); None where glibc
    does not say."""
    libc = _libc()
    return None if libc is None else int(libc.mallinfo2().arena)


def tell(store: Any, attempt: int) -> int | None:
    """As a member: say this process's heap size under the store's key for ``attempt``. What was said, if any."""
    size = heap_bytes()
    if size is not None:
        store.set(_KEY.format(attempt=attempt), str(size))
    return size


def told(store: Any, attempt: int) -> int | None:
    """As a spare: the heap size a member said for ``attempt``, or None while none has."""
    key = _KEY.format(attempt=attempt)
    if not store.check([key]):
        return None
    return int(store.get(key))


class HeapWarmer:
    """Grows this process's heap to a target a slice at a time (a spare looks for its place between slices): blocks
    allocated and every page written, held until the target is reached or ``release()``, then freed (kept by
    ``c_heap``'s settings, so the heap stays that large and resident)."""

    def __init__(self, target: int, slice_bytes: int = SLICE) -> None:
        self.target = target
        self.slice_bytes = slice_bytes
        self._libc = _libc()
        self._blocks: list[int] = []
        self.started = self.size()
        self.done = self._libc is None or self.started >= target

    def size(self) -> int:
        return 0 if self._libc is None else int(self._libc.mallinfo2().arena)

    def step(self) -> bool:
        """Grow the heap by up to one slice; whether it has reached the target (its blocks then freed)."""
        if self.done:
            return True
        libc, grown = self._libc, 0
        while grown < self.slice_bytes and self.size() < self.target:
            block = libc.malloc(_BLOCK)
            if not block:
                break  # out of memory: what was warmed stays warm
            self._blocks.append(block)
            ctypes.memset(block, 0, _BLOCK)  # every page faulted in now
            grown += _BLOCK
        if grown < self.slice_bytes:
            self.release()
        return self.done

    def release(self) -> None:
        """Free what is held (the heap keeps it); no more growing."""
        for block in self._blocks:
            self._libc.free(block)
        self._blocks = []
        self.done = True


class SpareHeap:
    """A waiting spare's heap, grown to the size a member said its own has, a slice at a time between the spare's
    looks for its place. ``ask()`` reads what a member said (None: nothing yet), at most every ``ASK_SECONDS``."""

    def __init__(self, ask: Callable[[], int | None]) -> None:
        self.ask = ask
        self.warmer: HeapWarmer | None = None
        self.asked = -math.inf
        self.on = enabled()

    def warm_a_slice(self) -> float:
        """Grow the heap by a slice where a member has said its size; the seconds that took (0: nothing done). The
        spare then rests as long: it grows at half a core's pace, beside a group that may share its cores."""
        if not self.on:
            return 0.0
        if self.warmer is None:
            if time.monotonic() - self.asked < ASK_SECONDS:
                return 0.0
            self.asked = time.monotonic()
            target = self.ask()
            if target is None:
                return 0.0
            self.warmer = HeapWarmer(target)
        began = time.monotonic()
        if self.warmer.step():
            self.on = False
            grown_mb, target_mb = (self.warmer.size() - self.warmer.started) / 2**20, self.warmer.target / 2**20
            if grown_mb > 0:
                print(
                    f"torchjob: the spare's heap grown by {grown_mb:.0f} MB to a member's {target_mb:.0f} MB",
                    flush=True,
                )
        return time.monotonic() - began

    def stop(self) -> None:
        """Given a place: what is held is freed (and kept by the heap)."""
        if self.warmer is not None:
            self.warmer.release()
