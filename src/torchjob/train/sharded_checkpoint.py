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
Model and optimizer states go through DCP's ``get_state_dict`` / ``set_state_dict``, so they are sharded the
same way for FSDP2, HSDP (``torchjob.train.fsdp``) and DDP models.
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import Future
from typing import Any

import fsspec
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.fsspec_filesystem import FsspecReader, FsspecWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter
from torch.optim import Optimizer

from torchjob.sections import section
from torchjob.train.context import DistContext

_MANIFEST = re.compile(r"step-(\d{12})\.json$")
_METADATA = ".metadata"


class ShardedCheckpointError(RuntimeError):
    """A sharded checkpoint could not be written or read."""


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
        # they never interleave with the training collectives (NCCL's included).
        self._group: dist.ProcessGroup | None = None
        if async_save and ctx.distributed:
            self._group = dist.new_group(backend="gloo")  # type: ignore[assignment]

    # -- saving ---------------------------------------------------------------------------------------

    def save(self, step: int, model: nn.Module, optimizer: Optimizer, extra: dict[str, Any] | None = None) -> None:
        """Save ``model`` and ``optimizer`` (and JSON-able ``extra``) as step ``step``; collective."""
        self.wait()
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
        folder = self._folder(step)
        manifest = {"step": step, "world_size": self.ctx.world_size, "extra": extra or {}}
        with section("checkpoint-save"):
            if self.async_save:
                response = dcp_async_save(
                    state,
                    storage_writer=self._writer(folder),
                    process_group=self._group,
                    no_dist=not self.ctx.distributed,
                )
                written: Future[Any] = response if isinstance(response, Future) else response.upload_completion
                # What wait() waits for is the commit, not only DCP's writes: a future's waiters wake before its
                # callbacks run, so waiting on the writes alone could return before the manifest exists.
                committed: Future[None] = Future()
                self._pending, self._pending_step = committed, step
                written.add_done_callback(lambda done: self._finish(done, manifest, committed))
                return
            dcp_save(state, storage_writer=self._writer(folder), no_dist=not self.ctx.distributed)
        self._commit(manifest)

    def wait(self) -> None:
        """Block until the last asynchronous save is written and committed; raise if it failed."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.result()
        except Exception as err:
            raise ShardedCheckpointError(f"the checkpoint of step {self._pending_step} failed: {err}") from err

    def _finish(self, written: Future[Any], manifest: dict[str, Any], committed: Future[None]) -> None:
        failed = written.exception()
        if failed is None:
            try:
                self._commit(manifest)
            except Exception as err:  # noqa: BLE001 - handed to wait(), which raises it in the training thread
                failed = err
        if failed is None:
            committed.set_result(None)
        else:
            committed.set_exception(failed)

    def _commit(self, manifest: dict[str, Any]) -> None:
        """Rank 0 writes the manifest once DCP's metadata is there (every rank's shards are then written), then
        removes all but the last ``keep`` checkpoints and any folder a save left without a manifest."""
        if not self.ctx.is_main:
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

    def load(self, model: nn.Module, optimizer: Optimizer) -> dict[str, Any] | None:
        """Load the newest committed checkpoint into ``model`` and ``optimizer`` (resharded to this group's
        ranks, whatever the group that saved it); its manifest, or None when there is none. Collective."""
        candidates = [s for s in self.steps() if self.fs.exists(f"{self._path(s)}/{_METADATA}")]
        if not candidates:
            return None
        step = candidates[-1]
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

    def _writer(self, folder: str) -> StorageWriter:
        if self._local:
            return FileSystemWriter(folder)
        return FsspecWriter(folder, **self.storage_options)

    def _reader(self, folder: str) -> StorageReader:
        if self._local:
            return FileSystemReader(folder)
        return FsspecReader(folder, **self.storage_options)
