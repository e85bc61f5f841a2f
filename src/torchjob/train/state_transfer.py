"""Bringing a re-formed group's joiners the state its holders keep: from every holder at once, to the joiners only.

After a re-form, each member says whether it holds its state and as of which step (``gathered``: one all-gather of
a few integers). A joiner (a spare, or a survivor at another step than the group carries on from) receives its
state from the members holding the same state: every member under DDP (group_state.py), the members with the same
shard under HSDP (sharded_in_place.py). Each holder sends its part of the tensors, so the joiner receives from
all of them at once, and nothing is sent to a member that holds its state already.

A holder has one tensor in flight to a joiner at a time, as gloo's own collectives keep one per peer: sends queued
behind one to a peer that died were seen never to end, even once its connections were cut (shard_copies.py). A
joiner posts every receive at once: gloo's sender waits for its receiver to be ready, and a receiver ready for
one tensor at a time made every send wait a round trip (2-3× the bytes' own time here). Every holder serves the
joiners in the same order, so none waits on another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from torchjob.train.context import DistContext
from torchjob.train.kept_shard import KeptShard, allocate, layout_of, size_of, tensors_of, wait_all


def gathered(ctx: DistContext, mine: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every rank's ``mine`` (a few integers), in rank order: one all-gather."""
    sent = torch.tensor(mine, dtype=torch.int64, device=ctx.device)
    table = [torch.zeros_like(sent) for _ in range(ctx.world_size)]
    dist.all_gather(table, sent)
    return [tuple(int(v) for v in row) for row in table]


def send(rank: int, senders: dict[int, list[int]], kept: KeptShard) -> None:
    """As a holder: each joiner whose state this rank holds (``senders``: each joiner's holders) gets its part of
    the tensors; the first holder also sends what the joiner needs to know first (the optimizer's layout and
    options, the state tensors' shapes)."""
    for joiner, holders in senders.items():
        if rank not in holders:
            continue
        if rank == holders[0]:
            dist.send_object_list([layout_of(kept)], dst=joiner)
        for index, tensor in enumerate(tensors_of(kept)):
            if holders[index % len(holders)] == rank:
                dist.send(tensor.contiguous(), dst=joiner)


def sends(rank: int, senders: dict[int, list[int]]) -> bool:
    """Whether ``rank`` holds state some joiner receives (``senders``: each joiner's holders)."""
    return any(rank in holders for holders in senders.values())


@contextlib.contextmanager
def sending(ctx: DistContext, senders: dict[int, list[int]], kept: KeptShard | None) -> Iterator[None]:
    """``send`` in a thread of its own while the caller does what needs no collective of the group (a sharded
    member builds its new model meanwhile: the sends give up the GIL while they wait on the socket); the sends'
    error, if any, is raised when the block ends, once they have. Nothing where ``kept`` is None."""
    if kept is None:
        yield
        return
    thread, failed = in_thread(ctx.device, lambda: send(ctx.rank, senders, kept), "torchjob-send-state")
    try:
        yield
    finally:
        thread.join()
    if failed:
        raise failed[0]


def in_thread(
    device: torch.device, work: Callable[[], None], name: str
) -> tuple[threading.Thread, list[BaseException]]:
    """``work`` started in a daemon thread of its own, and the list that will hold what it raised, for the caller
    to raise in its own thread once the thread has ended. On a GPU the thread's current device is ``device``
    first: NCCL sends on it."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            if device.type == "cuda":
                torch.cuda.set_device(device)
            work()
        except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
            failed.append(error)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, failed


def receive_started(
    holders: list[int],
    device: torch.device,
    params: dict[str, torch.Tensor] | None = None,
    buffers: dict[str, torch.Tensor] | None = None,
    what: str = "state",
) -> Callable[[], KeptShard]:
    """As a joiner: the state the ``holders`` hold, received into ``params`` and ``buffers`` (this member's own
    model's tensors; where None, tensors allocated for them) and into optimizer state allocated from the layout
    the first holder sends. Returns, once the layout is received and every receive posted, what waits for them
    and gives the state: gloo receives in threads of its own meanwhile, so a joiner builds its model while its
    bytes arrive. (A receive in a thread of the joiner's own waited for the GIL at each of its hundreds of tensors
    while the model was built: HSDP's 0.66 GB took 0.5 s instead of 0.19 s, by hand.)"""
    layout: list[Any] = [None]
    dist.recv_object_list(layout, src=holders[0])
    told: KeptShard = layout[0]
    if params is None or buffers is None:
        kept = allocate(told, device)
    else:
        kept = allocate(dataclasses.replace(told, params={}, buffers={}), device)
        kept.params, kept.buffers = params, buffers
    began = time.monotonic()
    tensors = tensors_of(kept)
    # Every receive posted at once, each from the holder that sends it (``send``'s share): each holder's sends
    # find their receiver ready, where one receive at a time made each send wait for it.
    works = [dist.irecv(t, src=holders[i % len(holders)]) for i, t in enumerate(tensors)]

    def received() -> KeptShard:
        wait_all(*works)
        print(
            f"torchjob: rank {dist.get_rank()}: received its {what} ({size_of(tensors) / 1e9:.2f} GB) from "
            f"{ranks(holders)} in {time.monotonic() - began:.2f} s",
            flush=True,
        )
        return kept

    return received


def said(senders: dict[int, list[int]], what: str, copies: bool = False) -> str:
    """Where each joiner's ``what`` (state, shard) came from, as the repair's log line says it."""
    if not senders:
        return f"every rank kept its {what}"
    if copies:
        return "; ".join(f"rank {joiner}'s {what} from rank {h[0]}'s copy" for joiner, h in sorted(senders.items()))
    return "; ".join(f"rank {joiner}'s {what} from {ranks(holders)}" for joiner, holders in sorted(senders.items()))


def ranks(numbers: list[int]) -> str:
    return f"rank{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}"
