"""In-place repair: a training loop whose survivors keep running when a peer is lost, and warm spares.

When a member of the group dies, every survivor sees a failed collective (a plain ``RuntimeError`` from
``backward``, ~30 ms after the death). Each survivor then at once drops its broken process group (a group kept
alive makes the other survivors wait for the full collective timeout), waits for the controller to publish
the next membership (:mod:`torchjob.train.channel`: a file locally, the operator in a Pod), joins a fresh
group under a fresh store prefix, takes the model, optimizer and step from a survivor by broadcast, wraps
the model in a new DDP, and carries on from the step that failed. The lost member's place goes to a warm
spare: a process that ran the same script up to :func:`torchjob.train.init` (torch and the script's imports
loaded) and waited there.

Every member runs the same collectives after a re-form (state broadcast, then ``DDP()``), so a joiner and
the survivors never disagree on what comes next, and every member gets a new DDP: a kept DDP beside a fresh
one can silently average misaligned buckets. Tested on gloo; for NCCL the same sequence holds, with the
communicator aborted rather than destroyed after a peer's death.

Data: the step function is given the step and the current context (rank, world size); a step's samples
must depend on those alone (e.g. :class:`torchjob.train.ResilientBatches`), so a repaired group retries the
failed step with the same samples, re-sharded over the new world, and no sample is trained twice or skipped.
"""

from __future__ import annotations

import gc
import json
import math
import os
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torchjob import worker_files
from torchjob.train import channel
from torchjob.train.channel import Channel
from torchjob.train.init import DistContext

StepFunction = Callable[[DistributedDataParallel, int, DistContext], Any]
# The store key (under a generation's prefix) that counts the members that arrived to form it.
_ARRIVALS = "torchjob/arrived"


def store_client(timeout: timedelta) -> Any:
    """The store torchjob hosts for the job (``TORCHJOB_STORE``): it outlives every trainer."""
    host, _, port = os.environ[worker_files.ENV_STORE].rpartition(":")
    return dist.TCPStore(host, int(port), is_master=False, timeout=timeout)  # type: ignore[attr-defined]


def is_newer(found: dict[str, Any] | None, attempt: int, generation: int) -> bool:
    """Whether ``found`` is a membership of ``attempt`` with a generation above ``generation``."""
    return found is not None and found.get("attempt") == attempt and int(found.get("generation", -1)) > generation


def wait_for_membership(channel: Channel, attempt: int, newer_than: int, deadline: float) -> dict[str, Any] | None:
    """The first membership of ``attempt`` with a generation above ``newer_than``; None at the deadline."""
    while time.monotonic() < deadline:
        found = channel.membership()
        if is_newer(found, attempt, newer_than):
            return found
        time.sleep(channel.poll_seconds)
    return None


def absorb_first_ddp() -> None:
    """Build this process's first DDP on a private one-rank group, and drop both.

    In torch 2.15 the first DistributedDataParallel a process builds keeps its process group alive for good
    (seen here: the group outlives destroy_process_group() and gc, while later DDPs release theirs). For the
    group a job trains in, that breaks in-place repair: its sockets never close, so a survivor still blocked
    in a collective with this rank was seen waiting for the full collective timeout after this rank had
    moved on. The private group takes the leak instead; the import of torch._dynamo that the first DDP
    needs (~4 s) happens here, once, too.
    """
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    DistributedDataParallel(nn.Linear(1, 1))
    dist.destroy_process_group()


def init_generation(backend: str, attempt: int, generation: int, rank: int, world: int, timeout: timedelta) -> None:
    """Join one generation of the attempt's group at the store torchjob hosts, under its own prefix."""
    prefix = worker_files.group_prefix(attempt, generation)
    store = dist.PrefixStore(prefix, store_client(timeout))  # type: ignore[attr-defined]
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def everyone_arrived(talk: Channel, found: dict[str, Any], timeout: timedelta) -> bool:
    """Wait until every member of the generation ``found`` describes has arrived at the store; False as soon
    as the controller publishes a newer one instead (a member died before it arrived: the repair is redone
    around it, and waiting in ``init_process_group`` for the dead member would last its whole timeout)."""
    attempt, generation, world = int(found["attempt"]), int(found["generation"]), len(found["members"])
    store = dist.PrefixStore(worker_files.group_prefix(attempt, generation), store_client(timeout))  # type: ignore[attr-defined]
    store.add(_ARRIVALS, 1)
    deadline = time.monotonic() + timeout.total_seconds()
    asked_at = time.monotonic()
    while store.add(_ARRIVALS, 0) < world:
        now = time.monotonic()
        if now - asked_at >= talk.poll_seconds:
            asked_at = now
            if is_newer(talk.membership(), attempt, generation):
                return False
        if now > deadline:
            raise RuntimeError(f"generation {generation} of the group did not form within {timeout.total_seconds():g}s")
        time.sleep(0.002)
    return True


def join_next(
    talk: Channel, backend: str, replica: str, attempt: int, after: int, deadline: float, timeout: timedelta
) -> tuple[dict[str, Any], float, int, int]:
    """Join, as ``replica``, the newest generation of ``attempt`` above ``after`` that forms (one that a newer
    supersedes before everyone arrived is skipped). Returns its membership, when it was read (wall clock), this
    rank and the world size.
    ``deadline`` (monotonic) bounds the wait for a membership; ``timeout`` each generation's forming."""
    while True:
        found = wait_for_membership(talk, attempt, after, deadline)
        if found is None:
            raise RuntimeError("the group was not repaired in time: no new membership was published")
        found_at = time.time()
        if everyone_arrived(talk, found, timeout):
            members: list[str] = found["members"]
            rank, world = members.index(replica), len(members)
            init_generation(backend, attempt, int(found["generation"]), rank, world, timeout)
            return found, found_at, rank, world
        after = int(found["generation"])


def wait_as_spare(ctx_backend: str, device: torch.device, timeout: timedelta) -> DistContext:
    """Block as a warm spare until the controller gives this process a lost replica's place; then join."""
    absorb_first_ddp()  # also imports torch._dynamo, which the first DDP()/Adam() needs (~4 s): paid while waiting
    spare = os.environ[worker_files.ENV_SPARE]
    attempt = int(os.environ.get(worker_files.ENV_ATTEMPT, "0"))
    talk = channel.from_env()
    talk.announce(spare, attempt)
    while True:
        found = talk.membership()
        if found is not None and found.get("attempt") == attempt and spare in (found.get("spares") or {}):
            break
        time.sleep(talk.poll_seconds)
    replica = found["spares"][spare]
    os.environ[worker_files.ENV_REPLICA] = replica  # from now on this process is that replica (files, logs)
    given = int(found["generation"])
    found, _, rank, world = join_next(talk, ctx_backend, replica, attempt, given - 1, math.inf, timeout)
    print(f"torchjob: spare {spare} joins as {replica} (rank {rank} of {world})", flush=True)
    return DistContext(
        rank, 0, world, device, ctx_backend, "torchjob", generation=int(found["generation"]), joined=True
    )


class InPlaceTraining:
    """Runs ``step_fn`` for every step, repairing the group in place when a peer is lost.

    ``step_fn(ddp, step, ctx)`` does one optimizer step of global step ``step`` with the current group.
    Without a store torchjob hosts (another launcher), a failed collective is raised as usual.
    """

    def __init__(
        self,
        ctx: DistContext,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        repair_timeout: float = 60.0,
        **ddp_options: Any,
    ) -> None:
        self.ctx = ctx
        self.model = model.to(ctx.device)
        self.optimizer = optimizer
        self.repair_timeout = repair_timeout
        self.ddp_options = ddp_options
        self.step = 0
        self.repairs = 0
        self.output = worker_files.output_dir()
        self.channel = channel.from_env()
        self.replica = os.environ.get(worker_files.ENV_REPLICA, "")
        self.attempt = int(os.environ.get(worker_files.ENV_ATTEMPT, "0"))
        self.repairable = bool(os.environ.get(worker_files.ENV_STORE) and self.replica)
        self.ddp: DistributedDataParallel | None = None
        # Whether this process holds the group's training state: a joiner gets it from a survivor.
        self.has_state = not ctx.joined
        self._unlogged: dict[str, Any] | None = None  # the last repair's timings, until its first step is done
        self._reporter = False  # whether this rank says and records the last repair (the lowest survivor)
        if ctx.joined:
            self._take_state_and_wrap()
        else:
            self.ddp = self._wrap()
        if self.repairable:
            self.channel.announce(worker_files.process_key(self.replica, 0, ctx.rank), self.attempt)

    def run(self, step_fn: StepFunction, total_steps: int, start_step: int = 0) -> None:
        if not self.ctx.joined:
            self.step = start_step
        while self.step < total_steps:
            assert self.ddp is not None
            failed_at: float | None = None
            try:
                step_fn(self.ddp, self.step, self.ctx)
            except RuntimeError:
                if not self.repairable:
                    raise
                failed_at = time.time()  # repaired outside the except block: its traceback holds the broken group
            if failed_at is not None:
                self._repair(failed_at)
            else:
                self.step += 1
                if self._unlogged is not None:
                    self._log_repair({**self._unlogged, "first_step_at": time.time()})

    def _repair(self, failed_at: float) -> None:
        started = time.monotonic()
        # Drop the broken group at once, and every reference to it (the DDP reducer holds one): peers that
        # are not the dead rank's neighbours learn of the failure only when the survivors' sockets close.
        broken = weakref.ref(dist.distributed_c10d._get_default_group())
        self.ddp = None
        abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
        if self.ctx.backend == "nccl" and abort is not None:
            abort()  # NCCL: a collective teardown with a dead peer can hang; abort the communicators instead
        else:
            dist.destroy_process_group()
        if broken() is not None:
            gc.collect()  # ~0.2 s with dynamo loaded: only when refcounting did not free the group
            if broken() is not None:
                print(f"torchjob: warning: rank {self.ctx.rank} could not close its broken group", flush=True)
        timeout = timedelta(seconds=max(self.repair_timeout, 30.0))
        found, published_at, rank, world = join_next(
            self.channel,
            self.ctx.backend,
            self.replica,
            self.attempt,
            self.ctx.generation,
            started + self.repair_timeout,
            timeout,
        )
        self.ctx = replace(self.ctx, rank=rank, world_size=world, generation=int(found["generation"]))
        source = self._take_state_and_wrap()
        self.repairs += 1
        timings = {"failed_at": failed_at, "membership_at": published_at, "reformed_at": time.time()}
        self._unlogged = {"generation": self.ctx.generation, "step": self.step, **timings}
        self._reporter = self.ctx.rank == source  # the lowest survivor (rank 0 may be the joiner now)
        if self._reporter:
            took = time.monotonic() - started
            print(
                f"Rank {rank}: group repaired in place (generation {self.ctx.generation}, {world} ranks, state from "
                f"rank {source}) in {took * 1000:.0f} ms; retrying step {self.step}",
                flush=True,
            )

    def _log_repair(self, record: dict[str, Any]) -> None:
        self._unlogged = None
        if self._reporter:
            path = worker_files.repairs_file(self.output)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as log:
                log.write(json.dumps(record) + "\n")

    def _take_state_and_wrap(self) -> int:
        """Every member, joiners included: the state from the lowest rank that has it (a survivor; not a
        joiner, even one promoted in a generation that never formed), then a new DDP. Returns that rank."""
        holders: list[Any] = [None] * self.ctx.world_size
        dist.all_gather_object(holders, self.has_state)
        source = min((rank for rank, has in enumerate(holders) if has), default=None)
        if source is None:
            raise RuntimeError("no member of the repaired group holds the training state")
        state: list[Any] = [
            {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step}
        ]
        dist.broadcast_object_list(state, src=source)
        self.model.load_state_dict(state[0]["model"])
        self.optimizer.load_state_dict(state[0]["optimizer"])
        self.step = int(state[0]["step"])
        self.has_state = True
        self.ddp = self._wrap()
        return source

    def _wrap(self) -> DistributedDataParallel:
        device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        return DistributedDataParallel(self.model, device_ids=device_ids, **self.ddp_options)
