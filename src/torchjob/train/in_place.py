"""In-place repair: a training loop whose survivors keep running when a peer is lost, and warm spares.

When a member of the group dies, every survivor sees a failed collective (a plain ``RuntimeError`` from
``backward``, ~30 ms after the death). Each survivor then at once drops its broken process group (a group kept
alive makes the other survivors wait for the full collective timeout), waits for the controller to publish
the next membership (``torchjob.train.channel``: a file locally, the operator in a Pod), joins a fresh
group under a fresh store prefix, takes the model, optimizer and step from a survivor by broadcast, wraps
the model in a new DDP, and carries on from the step that failed. The lost member's place goes to a warm
spare: a process that ran the same script up to ``torchjob.train.init`` (torch and the script's imports
loaded) and waited there.

The group also changes by decision: an elastic group (``TORCHJOB_ELASTIC``) when the controller publishes a
smaller membership (scaled down) or a larger one (a spare takes an empty place), and any group when a member on
notice of eviction hands its place to a spare (``torchjob.train.eviction``). Members that are not failing
cannot be interrupted, so before every step they agree, with one all-reduce of one integer, on the newest
membership any of them has seen (a background thread reads it), and re-form together at that step when it
changed; a member left out, or replaced, exits. Forming itself is ``torchjob.train.generations``.

Every member runs the same collectives after a re-form (state broadcast, then ``DDP()``), so a joiner and
the survivors never disagree on what comes next, and every member gets a new DDP: a kept DDP beside a fresh
one can silently average misaligned buckets. What a member holds, and where a joiner's comes from, is the
``GroupState``'s (group_state.py): DDP's whole model from the lowest survivor, or a sharded model's shard from
its replica (``InPlaceTraining.sharded``, sharded_in_place.py). Tested on gloo; for NCCL the same sequence
holds, with the communicator aborted rather than destroyed after a peer's death.

Data: the step function is given the step and the current context (rank, world size); a step's samples
must depend on those alone (e.g. ``torchjob.train.ResilientBatches``), so a repaired group retries the
failed step with the same samples, re-sharded over the new world, and no sample is trained twice or skipped.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from torchjob import worker_files
from torchjob.train import channel, generations, preemption, sharded_in_place, warm_heap
from torchjob.train.context import DistContext
from torchjob.train.eviction import EvictionHold
from torchjob.train.group_state import GroupState, ReplicatedState, Restored
from torchjob.train.presence import Presence
from torchjob.train.step_clock import StepClock

StepFunction = Callable[[nn.Module, int, DistContext], Any]


class StepLeftError(RuntimeError):
    """A module's forward in a step its member left (the controller published a group repaired around a lost
    peer): the step fails as it would at its next collective."""


class InPlaceTraining:
    """Runs ``step_fn`` for every step, repairing the group in place when a peer is lost.

    ``step_fn(ddp, step, ctx)`` does one optimizer step of global step ``step`` with the current group.
    Without a store torchjob hosts (another launcher), a failed collective is raised as usual.
    In an elastic group (``TORCHJOB_ELASTIC``) the members also agree, before each step, on the newest
    membership any of them has seen (one small all-reduce), and re-form together when it changed: a spare
    joins, or a member that has no place left leaves (its process exits).
    """

    def __init__(
        self,
        ctx: DistContext,
        model: nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        repair_timeout: float | None = None,
        *,
        state: GroupState | None = None,
        **ddp_options: Any,
    ) -> None:
        """``model`` and ``optimizer`` are DDP's; a sharded model's state comes from ``sharded``. ``repair_timeout``:
        how long the survivors of a lost peer wait for their new membership before they give up (the group restarts);
        by default as long as torchjob waits for a spare, and 15 s more (``TORCHJOB_REPAIR_TIMEOUT``), else 60 s."""
        self.ctx = ctx
        if state is None:
            if model is None or optimizer is None:
                raise TypeError("InPlaceTraining needs a model and its optimizer (or use InPlaceTraining.sharded)")
            state = ReplicatedState(model.to(ctx.device), optimizer, ddp_options)
        self.state: GroupState = state
        self.repair_timeout = repair_timeout if repair_timeout is not None else worker_files.repair_timeout()
        self.step = 0
        self.repairs = 0  # re-forms after a lost peer
        self.regroups = 0  # re-forms of an elastic group that grew or shrank by decision
        self.output = worker_files.output_dir()
        self.channel = channel.from_env()
        self.replica = os.environ.get(worker_files.ENV_REPLICA, "")
        self.attempt = int(os.environ.get(worker_files.ENV_ATTEMPT, "0"))
        self.repairable = bool(os.environ.get(worker_files.ENV_STORE) and self.replica)
        self.module: nn.Module | None = None  # what the step function is given: the DDP, or the sharded model
        # Whether this process holds the group's training state: a joiner gets it from a survivor.
        self.has_state = not ctx.joined
        self._unlogged: dict[str, Any] | None = None  # the last re-form's timings, until its first step is done
        self._reporter = False  # whether this rank says and records the last re-form (the lowest survivor)
        # A step far past its usual time, while the controller has published the next membership, waits on a
        # silent peer (peers.py).
        self.clock = StepClock()
        # What it says to and hears from the controller, in its watching thread (where the controller repairs).
        self.presence: Presence | None = None
        self.eviction: EvictionHold | None = None  # a notice of eviction held until a spare takes the place
        self._training_thread: int | None = None  # the thread in run(), whose forwards a left step stops
        self._hooked: tuple[nn.Module | None, list[Any]] = (None, [])  # the model whose gradients stop it too
        self._steps_here = 0  # steps this process completed: its heap's size is told after a few (warm_heap.py)
        if self.repairable:
            self.presence = Presence(self.channel, self.replica, self.attempt, self.clock, lambda: self.ctx)
        if ctx.joined:
            self._restore()
        else:
            self.module = self.state.wrap(ctx)
        if self.presence is not None:
            if self.presence.speaks:
                self.presence.announce()
            told = (lambda: self.channel.notice_considered) if self.channel.tells_notice_considered else None
            self.eviction = EvictionHold(ctx.rank, lambda: self.ctx.generation, self._newest, self._note_eviction, told)
            self.presence.eviction = self.eviction

    @classmethod
    def sharded(
        cls,
        ctx: DistContext,
        build: Callable[[], nn.Module],
        make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
        replicas: int,
        units: Callable[[nn.Module], Iterable[nn.Module]] | None = None,
        repair_timeout: float | None = None,
        copy_every: int = 1,
        reshard_after_forward: bool = True,
    ) -> InPlaceTraining:
        """In-place repair of a sharded model: HSDP over ``replicas`` replica groups, each sharded over world /
        ``replicas`` ranks, so that a lost rank's shard lives on in another group (sharded_in_place.py).

        ``build()`` constructs the unsharded model (the same weights on every rank: seed it); a re-form calls it
        again on the meta device, so it must only construct. ``make_optimizer(model)`` is called once, with
        the sharded model; the optimizer then stays the same object. ``units(model)`` names the modules
        sharded on their own (``shard_model``). After a re-form the model is a new module: use the one the step
        function is given, and ``model`` after ``run``. With ``replicas=1`` (plain FSDP) each rank's shard is
        copied to its neighbour every ``copy_every`` steps (shard_copies.py): a repair goes back to the last
        copy. ``reshard_after_forward`` is ``shard_model``'s."""
        state = sharded_in_place.ShardedState(
            ctx, build, make_optimizer, replicas, units, copy_every, reshard_after_forward
        )
        return cls(ctx, repair_timeout=repair_timeout, state=state)

    @property
    def model(self) -> nn.Module:
        """The model, unwrapped (DDP's is the one the script built; a sharded one is a joiner's own, built when it
        joined)."""
        return self.state.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.state.optimizer

    def run(
        self,
        step_fn: StepFunction,
        total_steps: int,
        start_step: int = 0,
        between_steps: Callable[[int], Any] | None = None,
    ) -> None:
        """Train from ``start_step`` (a joiner: from the group's step) to ``total_steps``. ``between_steps(n)``
        runs on every member once step ``n`` is done (e.g. a checkpoint every so many steps), with the current
        group, so its collectives are the group's: a peer lost in it is repaired as in a step, and the group
        goes on from step ``n`` (it is not run again for ``n``)."""
        if not self.ctx.joined:
            self.step = start_step
        # A step the watching thread left can only fail, but it fails only at its next collective waited for, and
        # DDP waits for none in its forward and only at the end of its backward: so under DDP the step raises at its
        # next module's forward or its next parameter's gradient. A sharded model waits on each unit's all-gather
        # and reduce-scatter, which a cut fails at once: nothing is hooked there (with the hooks, 3 of 9 sharded
        # repairs in three bench.state runs found survivors stalled 14-25 s in the step they left; not traced).
        self._training_thread = threading.get_ident()
        if self.presence is not None:
            self.presence.training_thread = self._training_thread
        replicated = isinstance(self.state, ReplicatedState)
        leaving = nn.modules.module.register_module_forward_pre_hook(self._leave_if_left) if replicated else None
        try:
            while self.step < total_steps:
                assert self.module is not None
                self._hook_gradients(self.state.model if replicated else None)
                failed_at: float | None = None
                changed = stepped = False
                began = self.clock.begin(self.ctx.generation)
                try:
                    changed = self._membership_changed()
                    self._note_whole()
                    if not changed:
                        self.state.before_step(self.ctx, self.step)
                        step_fn(self.module, self.step, self.ctx)
                        stepped = True
                        self.state.after_step(self.ctx, self.step + 1)
                        if between_steps is not None:
                            between_steps(self.step + 1)
                except RuntimeError as error:
                    if not self.repairable:
                        raise
                    failed_at = time.time()  # repaired outside the except block: its traceback holds the broken group
                    text = str(error).strip()
                    said = text.splitlines()[0][:200] if text else type(error).__name__
                    print(f"torchjob: rank {self.ctx.rank}: its step failed ({said})", flush=True)
                finally:
                    self.clock.end()  # from here on the old group's connections are this thread's to drop
                if stepped:  # done, even where what followed it failed: the group carries on from the next
                    self.step += 1
                if failed_at is not None:
                    self._repair(failed_at)
                elif changed:
                    self._regroup()
                else:
                    self.clock.completed(began)
                    if self.presence is not None:
                        self.presence.settled = True
                    self._tell_heap()
                    if self._unlogged is not None:
                        self._log_repair({**self._unlogged, "first_step_at": time.time()})
        finally:
            if leaving is not None:
                leaving.remove()
            self._hook_gradients(None)

    def _tell_heap(self) -> None:
        """Rank 0, after its first few steps: its heap's size, which waiting spares grow theirs to (warm_heap.py)."""
        self._steps_here += 1
        if self._steps_here != warm_heap.STEPS_BEFORE_TELLING or not self.repairable or self.ctx.rank != 0:
            return
        if warm_heap.enabled():
            timeout = timedelta(seconds=max(self.repair_timeout, 30.0))
            warm_heap.tell(generations.CONNECTION.for_generation(timeout), self.attempt)

    def _leave_if_left(self, *_: Any) -> None:
        if self.clock.was_left() and threading.get_ident() == self._training_thread:
            raise StepLeftError(f"rank {self.ctx.rank}: left its step: the group was repaired around a lost peer")

    def _hook_gradients(self, model: nn.Module | None) -> None:
        """``_leave_if_left`` after each gradient of ``model``'s parameters is accumulated (None: after none), and
        no longer after the last model's."""
        if model is self._hooked[0]:
            return
        for handle in self._hooked[1]:
            handle.remove()
        parameters = list(model.parameters()) if model is not None else []
        hook = self._leave_if_left
        handles = [p.register_post_accumulate_grad_hook(hook) for p in parameters]  # type: ignore[no-untyped-call]
        self._hooked = (model, handles)

    def _newest(self) -> int:
        return self.presence.watch.newest if self.presence is not None else -1

    def _note_eviction(self) -> None:
        preemption.record_notice(self.ctx.local_rank, self.ctx.rank)

    def _membership_changed(self) -> bool:
        """Whether any member saw a newer membership (all of them get the same answer): an elastic group grew
        or shrank, or a member on notice of eviction handed its place to a spare."""
        if self.presence is None:
            return False
        newest = torch.tensor([self.presence.watch.newest], dtype=torch.int64, device=self.ctx.device)
        dist.all_reduce(newest, op=dist.ReduceOp.MAX)
        return int(newest.item()) > self.ctx.generation

    def _note_whole(self) -> None:
        """After a re-form, at its first collective: every member has taken the group's state (a joiner its
        shard) once it has passed, which the re-form's own record, written when this member alone is done, cannot
        say (under HSDP rank 0 sends nothing, and the joiner is done after it)."""
        if self._unlogged is not None and self.presence is not None and "whole_at" not in self._unlogged:
            self._unlogged["whole_at"] = time.time()

    def _repair(self, failed_at: float) -> None:
        started = time.monotonic()
        if self.eviction is not None:
            self.eviction.repairing(True)
        # Drop the broken group at once, and every reference to it (the DDP reducer holds one, a sharded
        # model's mesh too): peers that are not the dead rank's neighbours learn of the failure only when the
        # survivors' sockets close.
        self.module = None
        self.state.release()
        generations.leave_group(self.ctx.backend, self.ctx.rank, broken=True)
        self.repairs += 1
        self._join(started, {"kind": "repair", "failed_at": failed_at}, "retrying step")

    def _regroup(self) -> None:
        """Every member is at the same step, after the same collective: the group is whole, and goes cleanly."""
        started, agreed_at = time.monotonic(), time.time()
        self.module = None
        self.state.release()
        generations.leave_group(self.ctx.backend, self.ctx.rank, broken=False)
        self.regroups += 1
        self._join(started, {"kind": "regroup", "agreed_at": agreed_at}, "at step")

    def _join(self, started: float, record: dict[str, Any], carrying_on: str) -> None:
        """Join the next generation and take the group's state; ``carrying_on`` says how, before the step the
        group carries on from (the state's: a sharded group may go back a step)."""
        if self.presence is not None:
            self.presence.settled = False
        timeout = timedelta(seconds=max(self.repair_timeout, 30.0))
        deadline = started + self.repair_timeout
        args = (self.channel, self.ctx.backend, self.replica, self.attempt, self.ctx.generation, deadline, timeout)
        self.clock.begin_forming()
        try:
            joined = generations.join_next(*args, replaced_by_joiner=True, holds_state=self.has_state)
        finally:
            self.clock.formed()
        if joined is None:
            # An elastic group scaled down past this member, or its place went to a spare on notice of its
            # eviction: the controller stops it, and it goes first.
            print(f"torchjob: {self.replica} has no place in the group any more and leaves it", flush=True)
            os._exit(0)
        if self.eviction is not None:
            self.eviction.repairing(False)
        formed_at = time.time()
        rank, world, generation = joined.rank, joined.world, joined.membership["generation"]
        self.ctx = replace(self.ctx, rank=rank, world_size=world, generation=generation, holder=joined.holder)
        restored = self._restore()
        timings = {"membership_at": joined.read_at, "formed_at": formed_at, "reformed_at": time.time()}
        self._unlogged = {**record, "generation": self.ctx.generation, "world": world, "step": self.step, **timings}
        self._reporter = self.ctx.rank == restored.reporter  # the lowest survivor (rank 0 may be the joiner now)
        if self._reporter:
            took = time.monotonic() - started
            what = "repaired" if record["kind"] == "repair" else "re-formed"
            print(
                f"Rank {rank}: group {what} in place (generation {self.ctx.generation}, {world} ranks, "
                f"{restored.source}) in {took * 1000:.0f} ms; {carrying_on} {self.step}",
                flush=True,
            )

    def _log_repair(self, record: dict[str, Any]) -> None:
        self._unlogged = None
        if self._reporter:
            path = worker_files.repairs_file(self.output)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as log:
                log.write(json.dumps(record) + "\n")

    def _restore(self) -> Restored:
        """Every member, joiners included: the group's state (``GroupState.restore``)."""
        restored = self.state.restore(self.ctx, self.has_state, self.step)
        self.module, self.step, self.has_state = restored.module, restored.step, True
        return restored
