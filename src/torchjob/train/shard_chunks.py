"""A shard's tensors sent as a few large messages instead of one per tensor (shard_copies.py).

A shard of a transformer is hundreds of tensors, most of them small. Sent one at a time, each waits for its
receiver to be ready for it: a round trip per tensor, which on a loaded machine cost more than the bytes
(bench.state: the neighbours' copies of a 0.33 GB shard took 1.3 s a step where its bytes take 0.16 s). Here the
tensors are laid out one after the other in one flat byte buffer (each at an aligned offset, so that a slice of it
can be viewed as the tensor), cut into chunks of about ``CHUNK_BYTES``: the receiver keeps its copy in such a
buffer and receives each chunk straight into it; the sender packs each chunk of several tensors into a staging
buffer (one tensor at least ``CHUNK_BYTES`` long is sent as it is), packing the next while the one before is in
flight. Still one message each way in flight at a time (shard_copies.py says why).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

CHUNK_BYTES = 32 * 2**20
_ALIGN = 64  # bytes: every tensor's offset, a multiple of any element's size


@dataclass(frozen=True)
class Chunk:
    """Tensors ``first`` to ``end`` (excluded), bytes ``start`` to ``stop`` of the flat layout."""

    first: int
    end: int
    start: int
    stop: int


@dataclass(frozen=True)
class FlatLayout:
    """Where each tensor of a list lies in one flat byte buffer, and the chunks it is sent in."""

    offsets: list[int]
    sizes: list[int]  # bytes
    chunks: list[Chunk]

    @property
    def total(self) -> int:
        return self.offsets[-1] + self.sizes[-1] if self.offsets else 0


def layout(
    specs: Sequence[tuple[torch.Size | tuple[int, ...], torch.dtype]], chunk_bytes: int = CHUNK_BYTES
) -> FlatLayout:
    """The flat layout of tensors of these shapes and types, in this order (sender and receiver compute the same)."""
    offsets, sizes, at = [], [], 0
    for shape, dtype in specs:
        at = -(-at // _ALIGN) * _ALIGN
        size = math.prod(shape) * dtype.itemsize
        offsets.append(at)
        sizes.append(size)
        at += size
    chunks: list[Chunk] = []
    first = 0
    for index in range(len(offsets)):
        last = index + 1 == len(offsets)
        grown = offsets[index] + sizes[index] - offsets[first]
        if last or grown >= chunk_bytes or offsets[index + 1] + sizes[index + 1] - offsets[first] > chunk_bytes:
            chunks.append(Chunk(first, index + 1, offsets[first], offsets[index] + sizes[index]))
            first = index + 1
    return FlatLayout(offsets, sizes, chunks)


def layout_of(tensors: Sequence[torch.Tensor], chunk_bytes: int = CHUNK_BYTES) -> FlatLayout:
    return layout([(t.shape, t.dtype) for t in tensors], chunk_bytes)


def views(
    flat: torch.Tensor, specs: Sequence[tuple[torch.Size | tuple[int, ...], torch.dtype]], placed: FlatLayout
) -> list[torch.Tensor]:
    """Tensors of ``specs``' shapes and types, each a view of its place (``placed``: ``layout(specs)``) in ``flat``
    (a uint8 buffer of ``placed.total`` bytes): what is received into ``flat`` is received into them."""
    return [
        flat[at : at + size].view(dtype).view(shape)
        for at, size, (shape, dtype) in zip(placed.offsets, placed.sizes, specs, strict=True)
    ]


class Outgoing:
    """The chunks of ``tensors`` as they are sent: each a uint8 tensor, packed where it holds several. Two staging
    buffers, alternating: one chunk may be in flight while the next is packed. ``staging``: a sender's two buffers
    kept from one send to the next (``Staging``), where it sends again and again; allocated here otherwise."""

    def __init__(
        self, tensors: Sequence[torch.Tensor], chunk_bytes: int = CHUNK_BYTES, staging: Staging | None = None
    ) -> None:
        self.tensors = list(tensors)
        self.layout = layout_of(self.tensors, chunk_bytes)
        self._staging = staging if staging is not None else Staging()

    def __len__(self) -> int:
        return len(self.layout.chunks)

    def chunk(self, index: int) -> torch.Tensor:
        """Chunk ``index``'s bytes; a packed one stays valid until chunk ``index + 2`` is asked for."""
        chunk = self.layout.chunks[index]
        if chunk.end - chunk.first == 1:
            return _bytes(self.tensors[chunk.first])
        needed = chunk.stop - chunk.start
        staging = self._staging.buffer(index % 2, needed, self.tensors[chunk.first].device)
        with torch.no_grad():
            for number in range(chunk.first, chunk.end):
                tensor = self.tensors[number]
                at = self.layout.offsets[number] - chunk.start
                staging[at : at + self.layout.sizes[number]].view(tensor.dtype).view(tensor.shape).copy_(tensor)
        return staging[:needed]


class Staging:
    """An ``Outgoing``'s two staging buffers, kept by a sender that sends every step (the neighbours' copies). Made
    anew for every send, two buffers of up to ``CHUNK_BYTES`` came from the C heap each step among tensors that
    outlive it, and the heap, which keeps what is freed (c_heap.py), grew by about their size every step (by hand,
    bench.state's plain-FSDP job: a rank's heap from 2.5 to 3.4 GB over 17 steps, what it held in use unchanged)."""

    def __init__(self) -> None:
        self._buffers: list[torch.Tensor | None] = [None, None]

    def buffer(self, which: int, needed: int, device: torch.device) -> torch.Tensor:
        """Buffer ``which`` (0 or 1), at least ``needed`` bytes long, on ``device``."""
        found = self._buffers[which]
        if found is None or found.numel() < needed or found.device != device:
            found = torch.empty(needed, dtype=torch.uint8, device=device)
            self._buffers[which] = found
        return found


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes as a flat uint8 tensor (a copy only where it is not contiguous)."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)
