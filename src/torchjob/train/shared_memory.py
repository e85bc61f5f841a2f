"""FSDP2's all-gathers between ranks of one machine through shared memory instead of loopback TCP.

On the CPU a plain-FSDP step of the GPT example moves ~1 GB a rank through its gathers and reduce-scatters, and
over loopback TCP every byte is copied into the kernel and out again, on cores the ranks share: 35-59% of this
machine's CPU went to the kernel during steady steps (4 ranks on 2 cores). NCCL carries the same traffic between
GPUs of one machine through shared memory; this does it for gloo's groups on the CPU.

Each rank of a group holds one anonymous shared file (``memfd_create``) of two slots, each as large as the largest
part it gathers yet (16 MiB at least). A gather writes this rank's part into one slot, waits for every peer's to
be written (one all-reduce of one number over the group), and copies each peer's part out of that peer's slot.
Calls alternate between the slots: a peer that is one gather ahead writes the other, and one that is two ahead has
passed that gather's all-reduce, which no rank enters before it has read the slot of the gather before. The
all-reduce is waited for as the peer collectives' sends are (``peers.done_or_left``): a peer that died or was
repaired away fails the gather instead of hanging it; a dead peer's slot is still memory to read, never a fault.

Peers map each other's file through ``/proc/<pid>/fd/<fd>``, so nothing is ever named in ``/dev/shm`` (a killed
rank leaves nothing behind; a Pod's 64 MiB ``/dev/shm`` does not limit it), and the file's pages are reserved at
once (``posix_fallocate``: a write to a page that cannot be had would be a SIGBUS, not an error). Every rank checks
a random token at the head of each peer's file; where any rank cannot reserve its file or cannot map and verify a
peer's (another machine or Pod, another PID namespace, no ``/proc``), the whole group agrees to keep loopback TCP,
and never tries again. A group's files are dropped with the group (a re-formed group, after an in-place repair,
makes its own at its first gather) or with the model.

What it costs: every rank's resident memory counts the pages of every peer's slots it reads (shared, counted once
by the machine, but in each rank's RSS): 2 × the largest part × the group's size; and on this machine each rank's
C heap ended larger, free within it (fragmented), for a reason not traced (``docs/examples/gpt.md``).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import stat
import weakref
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from torchjob.train import peers
from torchjob.train.kept_shard import wait_all

ENV_SHARED_MEMORY = "TORCHJOB_SHARED_MEMORY"
_HEADER = 4096  # the token, then the slots on a page boundary of their own
_TOKEN = 16
_NAME = "torchjob-collectives"  # what /proc shows of each file (``/memfd:<name> (deleted)``)
_SMALLEST_SLOT = 16 * 2**20  # so that a model's first few units (often the smallest) do not each remake the files


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this rank offers shared memory to its groups: unless ``TORCHJOB_SHARED_MEMORY=0``. A group uses it
    only where every rank offers it (a Master's environment may differ from its Workers')."""
    return environ.get(ENV_SHARED_MEMORY, "1").strip().lower() not in ("0", "false", "no")


@dataclass
class _Files:
    """One group's files: each rank's two slots, this rank's own among them, mapped here."""

    slot_bytes: int
    maps: list[torch.Tensor]  # one byte tensor over each rank's file, in the group's rank order
    calls: int = 0

    def slot(self, rank: int, index: int, like: torch.Tensor) -> torch.Tensor:
        start = _HEADER + index * self.slot_bytes
        nbytes = like.numel() * like.element_size()
        return self.maps[rank][start : start + nbytes].view(like.dtype).view(like.shape)


class SharedMemoryGather:
    """The all-gathers of one sharded model's groups through shared memory (this module's docstring); each group's
    files made at its first gather. ``all_gather`` returns False where a group cannot have them: the caller then
    gathers otherwise, as every rank of that group does."""

    def __init__(self, offered: bool = True) -> None:
        self.offered = offered  # False: this rank takes part in each group's agreement, and says no
        # By the group itself, not its name: a re-formed group (in-place repair) reuses its old group's names, and
        # its members keep this model (sharded_rebind.py). Weakly: nothing here keeps a left group's connections,
        # and its files go with it.
        self._groups: weakref.WeakKeyDictionary[dist.ProcessGroup, _Files | None] = weakref.WeakKeyDictionary()
        self._flag = torch.zeros(1)

    def used_by(self, group: dist.ProcessGroup) -> bool | None:
        """Whether ``group``'s gathers go through shared memory: None before its first gather."""
        return self._groups[group] is not None if group in self._groups else None

    def all_gather(self, output: torch.Tensor, part: torch.Tensor, group: dist.ProcessGroup) -> bool:
        """Every peer's ``part`` into its place in ``output`` (``output.chunk(size)``, in rank order); this rank's
        own place is left to the caller."""
        files = self._files(group, part.numel() * part.element_size())
        if files is None:
            return False
        index = files.calls % 2
        files.calls += 1
        me = group.rank()
        files.slot(me, index, part).copy_(part)
        self._all_written(group)
        places = output.chunk(group.size())
        for rank, place in enumerate(places):
            if rank != me:
                place.copy_(files.slot(rank, index, place))
        return True

    def _all_written(self, group: dist.ProcessGroup) -> None:
        _waited(dist.all_reduce(self._flag, group=group, async_op=True))

    def _files(self, group: dist.ProcessGroup, nbytes: int) -> _Files | None:
        if group in self._groups:
            files = self._groups[group]
            if files is None or files.slot_bytes >= nbytes:
                return files
        # Every rank of the group comes here at the same gather: the parts' sizes are the same on each.
        self._groups[group] = None  # the old files, if any, dropped before the new are made
        files = self._groups[group] = _made(group, _rounded(max(nbytes, _SMALLEST_SLOT)), self.offered)
        return files


def _rounded(nbytes: int) -> int:
    return -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE


def _made(group: dist.ProcessGroup, slot_bytes: int, offered: bool) -> _Files | None:
    """Each rank's file made and mapped by every rank of ``group``, or None on every rank where any rank could not
    or did not offer (two collectives, each waited for as a gather's all-reduce is: every rank's process, file and
    token, then whether each mapped all)."""
    size = _HEADER + 2 * slot_bytes
    token = secrets.token_bytes(_TOKEN)
    fd = _reserved(size, token) if offered else None
    mine = torch.tensor([os.getpid(), -1 if fd is None else fd, *_halves(token)], dtype=torch.int64)
    table = torch.empty(group.size() * len(mine), dtype=torch.int64)
    try:
        _waited(dist.all_gather_into_tensor(table, mine, group=group, async_op=True))
        rows = table.view(group.size(), -1).tolist()
        everyone = [(pid, fd_of, _joined(high, low)) for pid, fd_of, high, low in rows]
        maps = _mapped(everyone, size) if all(fd_of >= 0 for _, fd_of, _ in everyone) else None
        agreed = torch.tensor([1 if maps is not None else 0])
        _waited(dist.all_reduce(agreed, op=dist.ReduceOp.MIN, group=group, async_op=True))
    finally:
        if fd is not None:
            os.close(fd)  # after the agreement every peer has opened it; the mappings keep the pages
    if maps is None or not int(agreed.item()):
        return None
    return _Files(slot_bytes, maps)


def _waited(work: dist.Work | None) -> None:
    peers.done_or_left(lambda: wait_all(work), torch.device("cpu"), "a shared-memory collective's wait was")


def _halves(token: bytes) -> tuple[int, int]:
    return int.from_bytes(token[:8], "little", signed=True), int.from_bytes(token[8:], "little", signed=True)


def _joined(high: int, low: int) -> bytes:
    return high.to_bytes(8, "little", signed=True) + low.to_bytes(8, "little", signed=True)


def _reserved(size: int, token: bytes) -> int | None:
    """An anonymous shared file of ``size`` bytes, every page reserved, ``token`` at its head; None where this
    machine cannot give it."""
    try:
        fd = os.memfd_create(_NAME, os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None
    try:
        os.posix_fallocate(fd, 0, size)
        os.pwrite(fd, token, 0)
    except OSError:
        os.close(fd)
        return None
    return fd


def _mapped(everyone: list[tuple[int, int, bytes]], size: int) -> list[torch.Tensor] | None:
    """Every rank's file mapped here, each checked to be that rank's (its size and its token), or None. In another
    PID namespace the number a peer gave may be some other process's, here: nothing but a file of ours is opened."""
    maps = []
    for pid, fd, token in everyone:
        path = f"/proc/{pid}/fd/{fd}"
        if not _is_ours(path, size):
            return None
        try:
            peer_fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if os.fstat(peer_fd).st_size != size:
                return None
            mapping = mmap.mmap(peer_fd, size)
        except OSError:
            return None
        finally:
            os.close(peer_fd)
        if mapping[:_TOKEN] != token:
            with contextlib.suppress(BufferError):
                mapping.close()
            return None
        maps.append(torch.frombuffer(mapping, dtype=torch.uint8))
    return maps


def _is_ours(path: str, size: int) -> bool:
    """Whether ``path`` (a descriptor under ``/proc``) is one of these anonymous files, of ``size`` bytes: looked at
    before it is opened, as opening a device or a pipe of another process could do more than read it."""
    try:
        target, found = os.readlink(path), os.stat(path)
    except OSError:
        return False
    return target.startswith(f"/memfd:{_NAME} ") and stat.S_ISREG(found.st_mode) and found.st_size == size
