"""A shard's tensors sent in chunks (torchjob.train.shard_chunks): what arrives in the receiver's flat buffer is every
tensor as it was sent, whichever way the chunks are cut."""

from __future__ import annotations

import pytest
import torch

from torchjob.train import shard_chunks
from torchjob.train.kept_shard import KeptShard, allocate_flat, copied_into, layout_of, tensors_of


def _mixed() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [
        torch.randn(1000, 3, generator=generator),  # 12,000 bytes: alone in a chunk of 4 kB
        torch.tensor(7.0),  # AdamW's step: no dimensions
        torch.empty(0, 5),  # an FSDP2 shard of a dimension smaller than the world: empty
        torch.arange(33, dtype=torch.int8),  # 33 bytes: the next tensor starts aligned all the same
        torch.randn(17, generator=generator, dtype=torch.float64),
        torch.randn(40, 30, generator=generator).t(),  # not contiguous: packed as its values
        torch.randn(5, generator=generator).to(torch.bfloat16),
    ]


@pytest.mark.parametrize("chunk_bytes", [1, 4096, shard_chunks.CHUNK_BYTES])
def test_every_tensor_arrives_as_sent_however_the_chunks_are_cut(chunk_bytes: int) -> None:
    sent = _mixed()
    specs = [(t.shape, t.dtype) for t in sent]
    placed = shard_chunks.layout(specs, chunk_bytes)
    flat = torch.zeros(placed.total, dtype=torch.uint8)
    received = shard_chunks.views(flat, specs, placed)
    outgoing = shard_chunks.Outgoing(sent, chunk_bytes)
    assert [(c.first, c.end) for c in placed.chunks] == [
        (first.end if first else 0, c.end) for first, c in zip([None, *placed.chunks], placed.chunks, strict=False)
    ]  # every tensor in one chunk, in order
    assert placed.chunks[-1].end == len(sent)
    for index, chunk in enumerate(placed.chunks):
        flat[chunk.start : chunk.stop].copy_(outgoing.chunk(index))  # what a receive into the slice does
    for got, want in zip(received, sent, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert torch.equal(got, want)


def test_chunks_hold_many_small_tensors_and_a_large_one_alone() -> None:
    small = [torch.zeros(100) for _ in range(50)]  # 400 bytes each
    placed = shard_chunks.layout_of([*small, torch.zeros(5000), *small], chunk_bytes=4096)
    sizes = [c.end - c.first for c in placed.chunks]
    assert max(sizes) > 5 and 1 in sizes
    assert all(c.stop - c.start <= 4096 or c.end - c.first == 1 for c in placed.chunks)
    assert sum(sizes) == 101


def test_a_packed_chunk_stays_whole_while_the_next_is_packed() -> None:
    tensors = [torch.full((100,), float(n)) for n in range(30)]
    outgoing = shard_chunks.Outgoing(tensors, chunk_bytes=1024)
    first = outgoing.chunk(0).clone()
    in_flight = outgoing.chunk(0)
    outgoing.chunk(1)  # packed into the other staging buffer
    assert torch.equal(in_flight, first)


def test_sends_through_kept_staging_reuse_its_two_buffers_and_arrive_whole() -> None:
    staging = shard_chunks.Staging()
    used: set[int] = set()
    for send in range(3):  # the neighbours' copies: the same shard sent after every step, its values changing
        tensors = [torch.full((100,), float(send * 100 + n)) for n in range(30)]
        outgoing = shard_chunks.Outgoing(tensors, chunk_bytes=1024, staging=staging)
        placed = outgoing.layout
        flat = torch.zeros(placed.total, dtype=torch.uint8)
        for index, chunk in enumerate(placed.chunks):
            sent = outgoing.chunk(index)
            used.add(sent.untyped_storage().data_ptr())
            flat[chunk.start : chunk.stop].copy_(sent)
        received = shard_chunks.views(flat, [(t.shape, t.dtype) for t in tensors], placed)
        assert all(torch.equal(got, want) for got, want in zip(received, tensors, strict=True))
    assert len(used) == 2  # the same two buffers for every chunk of every send
    larger = shard_chunks.Outgoing([torch.ones(1000), torch.ones(1000)], chunk_bytes=16_000, staging=staging)
    assert torch.equal(larger.chunk(0)[:4000].view(torch.float32), torch.ones(1000))  # grown where a chunk is larger


def test_a_flat_copy_of_a_layout_is_received_through_its_one_buffer() -> None:
    live = KeptShard(
        world=2,
        params={"w": torch.randn(8, 4), "b": torch.randn(3)},
        optimizer={"w": {"step": torch.tensor(3.0), "exp_avg": torch.randn(8, 4), "note": "kept as is"}},
    )
    kept, flat = allocate_flat(layout_of(live), torch.device("cpu"))
    sent = tensors_of(live)
    outgoing = shard_chunks.Outgoing(sent)
    for index, chunk in enumerate(shard_chunks.layout_of(tensors_of(kept)).chunks):
        flat[chunk.start : chunk.stop].copy_(outgoing.chunk(index))
    assert all(torch.equal(a, b) for a, b in zip(tensors_of(kept), sent, strict=True))
    assert kept.optimizer["w"]["note"] == "kept as is"


def test_a_shard_copied_into_another_of_its_shapes_keeps_the_targets_tensors() -> None:
    source = KeptShard(
        world=2,
        params={"w": torch.randn(8, 4)},
        optimizer={"w": {"step": torch.tensor(7.0), "exp_avg": torch.randn(8, 4), "note": "newer"}},
        options=[{"lr": 0.5}],
    )
    target = KeptShard(
        world=2,
        params={"w": torch.zeros(8, 4)},
        optimizer={"w": {"step": torch.tensor(3.0), "exp_avg": torch.zeros(8, 4), "note": "older"}},
        options=[{"lr": 0.1}],
    )
    held = [t.data_ptr() for t in tensors_of(target)]
    assert copied_into(target, source) is target
    assert [t.data_ptr() for t in tensors_of(target)] == held  # copied into, not allocated anew
    assert all(torch.equal(a, b) for a, b in zip(tensors_of(target), tensors_of(source), strict=True))
    assert (target.optimizer["w"]["note"], target.options) == ("newer", [{"lr": 0.5}])
