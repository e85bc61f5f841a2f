"""Checkpoints a restarted job can trust: atomic, checksummed, the last K kept, optionally asynchronous.

Layout in the checkpoint location (a local folder — a mounted volume — or any fsspec URL such as
``s3://bucket/run``)::

    ckpt-000000000120.pt      torch.save of the state
    ckpt-000000000120.json    manifest: step, file, sha256, size — written *after* the data

A checkpoint exists only once its manifest does, and is used only if the data matches the manifest's
checksum. A save killed half-way leaves at most a temporary file (never a manifest), so ``load``
falls back to the previous good one. Local writes go to a temporary file, are fsynced and renamed.

Saving is collective when the world has more than one rank: every rank calls ``save`` (each rank's
RNG state is gathered into the checkpoint), and rank 0 alone writes. Credentials for object stores come
from the usual environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``...) through fsspec; they are never
logged.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import random
import re
import threading
import time
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import torch
import torch.distributed as dist

from torchjob.sections import section
from torchjob.train.context import DistContext
from torchjob.train.preemption import PreemptionWatch

_MANIFEST = re.compile(r"ckpt-(\d{12})\.json$")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written."""


class Checkpointer:
    def __init__(
        self,
        location: str | os.PathLike[str],
        ctx: DistContext,
        keep: int = 3,
        every_steps: int | None = None,
        async_save: bool = False,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.ctx = ctx
        self.keep = keep
        self.every_steps = every_steps
        self.async_save = async_save
        self.fs, self.root = fsspec.core.url_to_fs(str(location), **(storage_options or {}))
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))
        if ctx.is_main:
            self.fs.makedirs(self.root, exist_ok=True)
        self.last_save_seconds = 0.0
        self._pending: threading.Thread | None = None
        self._pending_error: BaseException | None = None
        # The last asynchronous save's copy of the state: the next copies into its tensors (the save before it is
        # written by then), so that a save costs a copy, not an allocation and its page faults too.
        self._snapshot: Any = None
        self._preemption = PreemptionWatch(ctx)

    # -- saving ---------------------------------------------------------------------------------------

    def due(self, step: int) -> bool:
        every = self.every_steps
        return every is not None and every > 0 and step % every == 0

    def save(self, state: dict[str, Any], step: int) -> None:
        """Save ``state`` as the checkpoint of ``step`` (collective; rank 0 writes).

        With ``async_save`` the state is copied to CPU memory now and written by a background thread, so
        training continues at once; a later save (or ``wait``) first waits for the one in flight.
        """
        started = time.perf_counter()
        with section("checkpoint-save"):  # its own allowance: no step deadline while it writes
            state = {**state, "rng": self._gather_rng_states()}
            if self.ctx.is_main:
                self.wait()
                if self.async_save:
                    snapshot = _cpu_copy(state, self._snapshot)
                    self._snapshot = snapshot
                    self._pending = threading.Thread(target=self._write_guarded, args=(snapshot, step), daemon=True)
                    self._pending.start()
                else:
                    self._write(state, step)
        self.last_save_seconds = time.perf_counter() - started

    def wait(self) -> None:
        """Block until an asynchronous save has finished; raise its error if it failed."""
        if self._pending is not None:
            self._pending.join()
            self._pending = None
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise CheckpointError(f"saving a checkpoint failed: {error}") from error

    def _write_guarded(self, state: dict[str, Any], step: int) -> None:
        try:
            self._write(state, step)
        except BaseException as err:  # noqa: BLE001 - handed to the training thread by wait()
            self._pending_error = err

    def _write(self, state: dict[str, Any], step: int) -> None:
        name = f"ckpt-{step:012d}"
        if self.local:
            # Stream into the temporary file, hashing on the way: no second in-memory copy of the state.
            digest, size = self._put_local(f"{name}.pt", lambda f: torch.save(state, f))
        else:
            buffer = io.BytesIO()
            torch.save(state, buffer)
            data = buffer.getvalue()
            digest, size = hashlib.sha256(data).hexdigest(), len(data)
            self.fs.pipe_file(f"{self.root}/{name}.pt", data)  # object stores write whole objects atomically
        manifest = {"step": step, "file": f"{name}.pt", "sha256": digest, "bytes": size, "time": time.time()}
        data = json.dumps(manifest).encode()
        if self.local:
            self._put_local(f"{name}.json", lambda f: f.write(data))  # the commit point
        else:
            self.fs.pipe_file(f"{self.root}/{name}.json", data)
        self._prune()

    def _put_local(self, name: str, fill: Any) -> tuple[str, int]:
        """Write ``name`` atomically: a temporary file, fsync, rename, fsync of the folder."""
        tmp = Path(self.root) / f".{name}.tmp-{os.getpid()}"
        with open(tmp, "wb") as raw:
            writer = _HashingWriter(raw)
            fill(writer)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, f"{self.root}/{name}")
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself must survive a crash
        finally:
            os.close(fd)
        return writer.sha256.hexdigest(), writer.size

    def _prune(self) -> None:
        steps = self._manifest_steps()
        for step in steps[: -self.keep]:
            for suffix in (".json", ".pt"):  # manifest first: a checkpoint without one is not used
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(f"{self.root}/ckpt-{step:012d}{suffix}")
        if self.local:
            for stale in Path(self.root).glob(".ckpt-*.tmp-*"):
                if not stale.name.endswith(f"-{os.getpid()}"):
                    stale.unlink(missing_ok=True)  # left by a save that was killed

    # -- loading --------------------------------------------------------------------------------------

    def _manifest_steps(self) -> list[int]:
        try:
            names = [Path(p).name for p in self.fs.ls(self.root, detail=False)]
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _MANIFEST.match(n)))

    def load(self, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
        """The newest valid checkpoint's state (with ``step``), or None. Corrupt ones are skipped.

        Collective in a group: every rank must resume from the same step, or the ranks' collectives fall out of
        step (gloo then reports a "collective mismatch", or the group hangs). Ranks that found different
        checkpoints (each Pod wrote to a folder of its own, and a replaced one found none) fail at once, saying so.
        """
        with section("checkpoint-load"):
            state = self._load(map_location)
        self._same_step_everywhere(None if state is None else int(state["step"]))
        return state

    def _same_step_everywhere(self, step: int | None) -> None:
        if not dist.is_initialized() or dist.get_world_size() < 2:
            return
        mine = torch.tensor([-1 if step is None else step], dtype=torch.long)
        steps = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(steps, mine)
        found = [int(t.item()) for t in steps]
        if len(set(found)) > 1:
            said = ", ".join(f"rank {r}: {'none' if s < 0 else f'step {s}'}" for r, s in enumerate(found))
            raise CheckpointError(
                f"the ranks found different checkpoints in {self.root} ({said}): every rank must read the same "
                "checkpoint folder; put it on storage every replica reaches (a shared volume, or s3://...)"
            )

    def _load(self, map_location: str | torch.device) -> dict[str, Any] | None:
        for step in reversed(self._manifest_steps()):
            base = f"{self.root}/ckpt-{step:012d}"
            try:
                manifest = json.loads(self.fs.cat_file(f"{base}.json"))
                data = self.fs.cat_file(f"{self.root}/{manifest['file']}")
            except (OSError, ValueError, KeyError) as err:
                self._warn(f"checkpoint of step {step} is unreadable ({err}); trying an older one")
                continue
            if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
                self._warn(f"checkpoint of step {step} fails its checksum; trying an older one")
                continue
            state: dict[str, Any] = torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
            state["step"] = step
            return state
        return None

    def restore_rng(self, state: dict[str, Any]) -> None:
        """Put this rank's random number generators back where they were at the checkpoint."""
        ranks = state.get("rng") or []
        if self.ctx.rank < len(ranks):
            _set_rng_state(ranks[self.ctx.rank])

    # -- preemption (see preemption.py) -------------------------------------------------------------------

    def handle_preemption(self, grace_seconds: float = 8.0) -> None:
        """On SIGTERM (eviction, preemption, a group restart) finish the current step, checkpoint, exit.

        The training loop asks ``preempted`` after each step; all ranks agree on the answer, so they
        stop at the same step and save together. A rank that cannot get there (stuck in a collective whose
        peer is gone) exits with 143 after ``grace_seconds``, before the controller's SIGKILL.
        """
        self._preemption.install(grace_seconds)

    def preempted(self) -> bool:
        """Whether any rank has been told to stop (collective: call it on every rank after each step)."""
        return self._preemption.any_rank()

    def exit_preempted(self, state: dict[str, Any], step: int) -> None:
        """Save a final checkpoint, wait for it, and exit with 143 so the controller retries the replica."""
        self.save(state, step)
        self.wait()
        self._preemption.exit(step)

    # -- helpers --------------------------------------------------------------------------------------

    def _gather_rng_states(self) -> list[dict[str, Any]]:
        local = _rng_state()
        if not self.ctx.distributed:
            return [local]
        everyone: list[Any] = [None] * self.ctx.world_size
        dist.all_gather_object(everyone, local)
        return everyone

    def _warn(self, message: str) -> None:
        if self.ctx.is_main:
            print(f"Rank 0: warning: {message}", flush=True)


class _HashingWriter(io.RawIOBase):
    """A write-only file that passes bytes through to another and hashes them on the way."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha256.update(view)
        self.size += len(view)
        written: int = self.target.write(view)
        return written

    def flush(self) -> None:
        self.target.flush()


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _cpu_copy(value: Any, kept: Any = None) -> Any:
    """A deep copy with every tensor copied to CPU memory, so training can go on changing the originals: into
    the tensor at the same place in ``kept`` (an earlier copy no longer in use) where its shape and type match."""
    if isinstance(value, torch.Tensor):
        if _fits(kept, value):
            return kept.copy_(value.detach())
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        by_key: dict[Any, Any] = kept if isinstance(kept, dict) else {}
        return {k: _cpu_copy(v, by_key.get(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        in_order = kept if isinstance(kept, (list, tuple)) and len(kept) == len(value) else [None] * len(value)
        return type(value)(_cpu_copy(v, w) for v, w in zip(value, in_order, strict=True))
    return copy.deepcopy(value)


def _fits(kept: Any, value: torch.Tensor) -> bool:
    return (
        isinstance(kept, torch.Tensor)
        and kept.device.type == "cpu"
        and kept.shape == value.shape
        and kept.dtype == value.dtype
        and kept.layout == value.layout == torch.strided
        and kept.is_contiguous()
    )
