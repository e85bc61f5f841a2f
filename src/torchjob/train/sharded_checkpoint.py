"""Checkpoints of sharded models with ``torch.distributed.checkpoint`` (DCP): every rank writes its own shards,
in parallel, and a checkpoint loads into a different number of ranks (4 → 3 for an elastic group).

Layout in the checkpoint location (a local folder, a mounted volume, or an fsspec URL such as ``s3://bucket/run``)::

    step-000000000120/             DCP's files: one or more per rank, and ``.metadata``
    step-000000000120.json         manifest: {"step", "world_size", "extra"} — written last, by rank 0

As with ``torchjob.train.Checkpointer``, a checkpoint exists only once its manifest does: the manifest is written
after every rank's shards and DCP's metadata, so a save killed half-way leaves a folder without a manifest that
``load`` never reads (and the next save's pruning removes). The newest manifest whose folder holds DCP's metadata
is loaded; the last ``keep`` are kept.

``save(step, model, optimizer)`` is collective (every rank calls it). With ``async_save=True`` it returns once
the state is staged in memory (DCP's ``async_save`` over a gloo group of its own), and the writes and the
manifest happen in the background; ``wait()`` blocks until they are done, and the next save waits for the last.

Under in-place repair (``torchjob.train.InPlaceTraining``) the training group changes under a save in flight: the
save group is made at the first save and again at the first save after the training group changed (the old one
went with it, and a joiner makes the new one with its peers, at the same save). A save still in flight from an
older group is not waited for: a peer of it may be gone, so its connections are cut and it is left unfinished. It
counts only if every rank's part had been written (DCP's metadata then exists and its manifest follows); otherwise
it has no manifest and is never loaded. A script that ends with such a save still in flight, without a save or
``wait()`` after the change, leaves it the same way at exit (Python would otherwise wait for DCP's thread).

Model and optimizer states go through DCP's ``get_state_dict`` / ``set_state_dict``, so they are sharded the
same way for FSDP2, HSDP (``torchjob.train.fsdp``) and DDP models.
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401 - its exit hook is registered before this module's (below)
import copy
import json
import os
import re
import threading
import weakref
from concurrent.futures import Future
from typing import Any

import fsspec
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.planner import SavePlan
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.storage import StorageReader
from torch.distributed.tensor import DTensor
from torch.optim import Optimizer

try:
    from torch.distributed.checkpoint.fsspec_filesystem import FsspecReader, FsspecWriter
except ImportError:  # torch before the module went public keeps the same classes under the private name
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter  # type: ignore[no-redef,unused-ignore]

from torchjob.sections import section
from torchjob.train import peers
from torchjob.train.context import DistContext

_MANIFEST = re.compile(r"step-(\d{12})\.json$")
_METADATA = ".metadata"
_LIVE: weakref.WeakSet[ShardedCheckpointer] = weakref.WeakSet()


class ShardedCheckpointError(RuntimeError):
    """A sharded checkpoint could not be written or read."""


def _leave_old_groups_at_exit() -> None:
    for checkpointer in list(_LIVE):
        checkpointer._leave_at_exit()


# Python's exit joins DCP's executor thread (concurrent.futures' own threading exit hook) before any atexit hook
# runs; threading's exit hooks run last-registered first, so this one, registered after that module's, runs before.
threading._register_atexit(_leave_old_groups_at_exit)  # type: ignore[attr-defined]


class ShardedCheckpointer:
    def __init__(
        self,
        location: str | os.PathLike[str],
        ctx: DistContext,
        keep: int = 3,
        async_save: bool = False,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.ctx, self.keep, self.async_save = ctx, keep, async_save
        self.location = str(location).rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.location, **(storage_options or {}))
        self.storage_options = storage_options or {}
        if ctx.is_main:
            self.fs.makedirs(self.root, exist_ok=True)
        self._pending: Future[Any] | None = None
        self._pending_step: int | None = None
        # DCP's background writes use collectives of their own: a gloo group beside the training one, so that
        # they never interleave with the training collectives (NCCL's included). Made at the first save in each
        # training group (see the module); its connections are known, to be cut if it is left behind.
        self._group: dist.ProcessGroup | None = None
        self._group_under: weakref.ref[dist.ProcessGroup] | None = None  # the training group it was made in
        self._group_connections: set[str] = set()
        self._staging = _StagingBuffers(pinned=ctx.device.type == "cuda")
        _LIVE.add(self)

    # -- saving ---------------------------------------------------------------------------------------

    def save(self, step: int, model: nn.Module, optimizer: Optimizer, extra: dict[str, Any] | None = None) -> None:
        """Save ``model`` and ``optimizer`` (and JSON-able ``extra``) as step ``step``; collective."""
        self.wait()
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
        folder = self._folder(step)
        rank, world = self._place()
        manifest = {"step": step, "world_size": world, "extra": extra or {}}
        with section("checkpoint-save"):
            if self.async_save:
                writer = self._writer(folder, rank, world)
                response = dcp_async_save(
                    state,
                    storage_writer=writer,
                    process_group=self._save_group(),
                    no_dist=not self.ctx.distributed,
                    async_stager=self._staging,
                )
                written: Future[Any] = response if isinstance(response, Future) else response.upload_completion
                # DCP's background thread decides whether its save is distributed by whether torch's default group
                # exists then: a repair leaving the group first would make it a save of one process (the writer
                # refuses it). Waiting for that decision here costs a thread's start.
                while not writer.decided.wait(0.05) and not written.done():
                    pass
                # What wait() waits for is the commit, not only DCP's writes: a future's waiters wake before its
                # callbacks run, so waiting on the writes alone could return before the manifest exists.
                committed: Future[None] = Future()
                self._pending, self._pending_step = committed, step
                written.add_done_callback(lambda done: self._finish(done, manifest, committed, rank == 0))
                return
            dcp_save(state, storage_writer=self._writer(folder, rank, world), no_dist=not self.ctx.distributed)
        self._commit(manifest, rank == 0)

    def wait(self) -> None:
        """Block until the last asynchronous save is written and committed; raise if it failed. A save in flight
        from an older training group is left unfinished instead (see the module)."""
        if self._group is not None and self._training_group_changed():
            self._leave_old_group()
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.result()
        except Exception as err:
            raise ShardedCheckpointError(f"the checkpoint of step {self._pending_step} failed: {err}") from err

    def _place(self) -> tuple[int, int]:
        """This rank and the world size in the training group now (a repair may have changed both)."""
        if self.ctx.distributed and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return self.ctx.rank, self.ctx.world_size

    def _leave_at_exit(self) -> None:
        """At exit: a save in flight over the save group of a training group since left or replaced is left
        unfinished, as the next save would (its thread, which exit waits for, may wait on a lost peer)."""
        if self._group is None or self._pending is None or self._pending.done():
            return
        if not dist.is_initialized() or self._training_group_changed():
            self._leave_old_group()

    def _training_group_changed(self) -> bool:
        """Whether another training group has been made since the save group was (none made yet: not changed)."""
        made_under = self._group_under() if self._group_under is not None else None
        return dist.is_initialized() and made_under is not dist.distributed_c10d._get_default_group()

    def _save_group(self) -> dist.ProcessGroup | None:
        """The gloo group of this training group's saves (collective the first time: every rank saves together)."""
        if not self.ctx.distributed:
            return None
        if self._group is None:
            kept = peers.kept_ports()
            before = peers.connection_ids(kept)
            self._group = dist.new_group(backend="gloo")  # type: ignore[assignment]
            self._group_connections = peers.connection_ids(kept) - before
            self._group_under = weakref.ref(dist.distributed_c10d._get_default_group())
        return self._group

    def _leave_old_group(self) -> None:
        """The training group changed: a save still in flight over the old save group may wait on a lost peer, so
        its connections are cut (it then fails, unless every part of it was already written) and it is not
        waited for; the next save makes a new group."""
        pending, step = self._pending, self._pending_step
        self._pending = None
        if pending is not None and not pending.done():
            cut = peers.cut_group_connections(peers.kept_ports(), only=self._group_connections)
            self._say_left_unfinished(step, f"{cut} of its connections cut")
        elif pending is not None and (failed := pending.exception()) is not None:
            # Leaving the training group unregisters the save group too: a save whose thread had not yet reached
            # its collectives fails at once, and is as unfinished as one whose connections are cut.
            self._say_left_unfinished(step, f"it failed: {failed}")
        self._group, self._group_under, self._group_connections = None, None, set()
        # The state is sharded anew in the new group; and the save left behind may still read the old buffers.
        self._staging = _StagingBuffers(pinned=self._staging.pinned)

    @staticmethod
    def _say_left_unfinished(step: int | None, how: str) -> None:
        print(
            f"torchjob: the checkpoint of step {step} was still being written when the group changed: left "
            f"unfinished ({how}); it counts only if every rank's part was written",
            flush=True,
        )

    def _finish(self, written: Future[Any], manifest: dict[str, Any], committed: Future[None], main: bool) -> None:
        failed = written.exception()
        if failed is None:
            try:
                self._commit(manifest, main)
            except Exception as err:  # noqa: BLE001 - handed to wait(), which raises it in the training thread
                failed = err
        if failed is None:
            committed.set_result(None)
        else:
            committed.set_exception(failed)

    def _commit(self, manifest: dict[str, Any], main: bool) -> None:
        """Rank 0 (``main``: of the group that saved) writes the manifest once DCP's metadata is there (every
        rank's shards are then written), then removes all but the last ``keep`` checkpoints and any folder a save
        left without a manifest."""
        if not main:
            return
        step = int(manifest["step"])
        if not self.fs.exists(f"{self._path(step)}/{_METADATA}"):
            raise ShardedCheckpointError(f"step {step}: DCP's metadata is missing after the save")
        with self.fs.open(f"{self._path(step)}.json", "w") as out:
            json.dump(manifest, out)
        self._prune(step)

    def _prune(self, newest: int) -> None:
        steps = self.steps()
        for old in steps[: -self.keep]:
            self.fs.rm(f"{self._path(old)}.json")
            self.fs.rm(self._path(old), recursive=True)
        kept = set(steps[-self.keep :])
        for entry in self.fs.ls(self.root, detail=False):
            name = str(entry).rstrip("/").rsplit("/", 1)[-1]
            found = re.fullmatch(r"step-(\d{12})", name)
            if found and int(found[1]) not in kept and int(found[1]) < newest:
                self.fs.rm(str(entry), recursive=True)  # a save that never committed

    # -- loading --------------------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """The committed checkpoints' steps, oldest first."""
        if not self.fs.exists(self.root):
            return []
        names = [str(entry).rsplit("/", 1)[-1] for entry in self.fs.ls(self.root, detail=False)]
        return sorted(int(m[1]) for name in names if (m := _MANIFEST.fullmatch(name)))

    def newest(self) -> int | None:
        """The step of the newest checkpoint ``load`` would load (committed, with DCP's metadata), or None: a
        script that will load one need not initialise its model first."""
        candidates = [s for s in self.steps() if self.fs.exists(f"{self._path(s)}/{_METADATA}")]
        return candidates[-1] if candidates else None

    def load(self, model: nn.Module, optimizer: Optimizer) -> dict[str, Any] | None:
        """Load the newest committed checkpoint into ``model`` and ``optimizer`` (resharded to this group's
        ranks, whatever the group that saved it); its manifest, or None when there is none. Collective."""
        step = self.newest()
        if step is None:
            return None
        with self.fs.open(f"{self._path(step)}.json") as found:
            manifest: dict[str, Any] = json.load(found)
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
        with section("checkpoint-load"):
            dcp_load(state, storage_reader=self._reader(self._folder(step)), no_dist=not self.ctx.distributed)
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)
        return manifest

    # -- where ----------------------------------------------------------------------------------------

    def _path(self, step: int) -> str:
        return f"{self.root}/step-{step:012d}"

    def _folder(self, step: int) -> str:
        """The checkpoint's folder as DCP's storage takes it: a local path, or the URL for fsspec."""
        name = f"step-{step:012d}"
        return self._path(step) if self._local else f"{self.location}/{name}"

    @property
    def _local(self) -> bool:
        protocol = self.fs.protocol
        return "file" in (protocol if isinstance(protocol, tuple) else (protocol,))

    def _writer(self, folder: str, rank: int, world: int) -> _GroupWriter:
        writer = _LocalWriter(folder) if self._local else _FsspecWriter(folder, **self.storage_options)
        writer.expect(rank, world)
        return writer

    def _reader(self, folder: str) -> StorageReader:
        if self._local:
            return FileSystemReader(folder)
        return FsspecReader(folder, **self.storage_options)


class _StagingBuffers:
    """DCP's ``AsyncStager``: copies the state into CPU buffers made at the first save and kept for the next ones
    (remade where a tensor's shape or type changed). Staging ends before ``stage`` returns, so DCP need not
    synchronize after it. Pinned for a model on a GPU, as DCP's own caching stager pins them.

    Only the plain local tensors are kept between saves. The staged DTensors are made at each save around them,
    with the live tensors' own specs: torch's ``_create_cpu_state_dict`` deep-copies every CPU DTensor, and with it
    its device mesh and the mesh's process groups, so kept buffers held the training group (under plain FSDP the
    default one) long after a repair had left it, one reference per tensor, until the next save remade them."""

    _synchronize_after_execute = False
    should_synchronize_after_execute = False

    def __init__(self, pinned: bool) -> None:
        self._buffers: dict[tuple[Any, ...], torch.Tensor] = {}  # by the tensor's path in the state
        self.pinned = pinned

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        used: set[tuple[Any, ...]] = set()  # the paths of this save's tensors
        staged: dict[str, Any] = self._staged(state_dict, (), used)
        for gone in self._buffers.keys() - used:  # a tensor the state no longer has
            del self._buffers[gone]
        return staged

    def _staged(self, value: Any, path: tuple[Any, ...], used: set[tuple[Any, ...]]) -> Any:
        if isinstance(value, DTensor):
            return DTensor(self._copied(value._local_tensor, path, used), value._spec, requires_grad=False)
        if isinstance(value, torch.Tensor):
            return self._copied(value, path, used)
        if isinstance(value, dict):
            return {key: self._staged(item, (*path, key), used) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            items = [self._staged(item, (*path, index), used) for index, item in enumerate(value)]
            return tuple(items) if isinstance(value, tuple) else items
        return copy.deepcopy(value)  # an option's value (a learning rate...), as the step had it

    def _copied(self, tensor: torch.Tensor, path: tuple[Any, ...], used: set[tuple[Any, ...]]) -> torch.Tensor:
        """``tensor``'s values in the CPU buffer kept at ``path`` (noted in ``used``)."""
        used.add(path)
        buffer = self._buffers.get(path)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=self.pinned and tensor.numel() > 0)
            self._buffers[path] = buffer
        buffer.copy_(tensor.detach())
        return buffer

    def synchronize_staging(self) -> None:
        """Nothing to wait for: ``stage`` copies before it returns."""

    def close(self) -> None:
        """The buffers outlive a save: kept for the next."""


class _GroupWriter(FileSystemWriter):
    """DCP's writer, for a save by a known group: it says when DCP has decided how the save runs, and refuses a
    save that runs with another rank or another number of ranks than the group's. DCP makes a save a save of one
    process when torch's default group is gone as it starts (a repair left the group first): every rank would
    then write as rank 0 of 1, and rank 0 alone would commit its own shards as the whole checkpoint."""

    def expect(self, rank: int, world: int) -> None:
        self.rank_expected, self.world_expected = rank, world
        self.decided = threading.Event()

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        try:
            super().set_up_storage_writer(is_coordinator, *args, **kwargs)
            rank = kwargs.get("rank", self.rank_expected)
            if rank != self.rank_expected:
                raise ShardedCheckpointError(
                    f"the save ran as rank {rank}, not as this process's rank {self.rank_expected} in its group"
                )
        finally:
            self.decided.set()

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        if len(plans) != self.world_expected:
            raise ShardedCheckpointError(f"the save ran over {len(plans)} ranks, not the group's {self.world_expected}")
        return super().prepare_global_plan(plans)


class _LocalWriter(_GroupWriter):
    """A local folder or mounted volume."""


class _FsspecWriter(_GroupWriter, FsspecWriter):
    """An fsspec URL (``s3://...``)."""
