"""In-place repair of a sharded model (FSDP2): a lost rank's shard comes back from its replica, or from a neighbour.

Under HSDP over R replica groups of S ranks each, rank ``g * S + s`` holds shard ``s`` of every parameter and of
its optimizer state, and so does rank ``s`` of every other group. When a rank is lost, its place goes to a spare
with the same rank, and the spare's shard comes from the survivors that hold shard ``s``: with several of them
(R > 2), each sends its part of the tensors at once. Under plain FSDP (R = 1) no other rank holds it, so each
rank keeps a copy of its left neighbour's shard, and the spare's shard comes from that copy: stepped with the
neighbour's gradients in every optimizer step where that step can be replayed (replayed_copies.py; a survivor
that had not stepped when a peer had steps on), sent whole every ``copy_every`` steps otherwise (shard_copies.py;
where the lost rank died before its newest copy was whole, the group goes back to the step before). No
checkpoint is read; nothing is sent to the survivors, who keep their own shards in memory.

A sharded model is bound to the group it was sharded over. A survivor that keeps its rank moves its model onto
the new group's process groups (sharded_rebind.py), its shard where it was; a joiner (or a survivor whose place
changed) builds one: ``build()`` on the meta device (nothing initialised), sharded over the new group, then
filled with the shard it receives (received while it builds) or its own, kept in memory across the re-form. The
optimizer stays the same object, its parameters and state pointed at the model's again, so that a learning-rate
scheduler built on it stays valid.

What it cannot repair, it says, and the loop's error ends the member (the controller restarts the group, from a
checkpoint): every rank of one shard lost at once (no survivor holds it; under plain FSDP, a rank and the
neighbour keeping its copy), HSDP's survivors that stopped at different steps (one completed a step its peers
failed), and a group whose size changed (an elastic group's shards would be laid out anew: use a fixed group).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from torchjob import worker_files
from torchjob.train import copy_replay, fsdp, generations, shard_copies, sharded_rebind, state_transfer
from torchjob.train.context import DistContext
from torchjob.train.group_state import Restored
from torchjob.train.kept_shard import (
    KeptShard,
    cloned,
    copied_into,
    local,
    shapes_of,
    shard_of,
)
from torchjob.train.replayed_copies import ReplayedCopies


class ShardedRepairError(RuntimeError):
    """A sharded group that cannot be made whole in place (the controller restarts it instead)."""


class ShardedState:
    """``torchjob.train.group_state.GroupState`` for a model sharded in HSDP's layout (see the module)."""

    def __init__(
        self,
        ctx: DistContext,
        build: Callable[[], nn.Module],
        make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
        replicas: int,
        units: Callable[[nn.Module], Iterable[nn.Module]] | None = None,
        copy_every: int = 1,
        reshard_after_forward: bool = True,
    ) -> None:
        if copy_every < 1:
            raise fsdp.ShardingError(
                f"InPlaceTraining.sharded: copy_every={copy_every}; expected a number of steps >= 1"
            )
        if os.environ.get(worker_files.ENV_ELASTIC):
            raise fsdp.ShardingError(
                "InPlaceTraining.sharded: an elastic group changes its size, and a sharded model's shards would be "
                "laid out anew; run it as a fixed group (minReplicas = maxReplicas)"
            )
        fsdp.check_layout(ctx.world_size, replicas)  # without making a mesh: a joiner makes its own when it joins
        self.replicas = replicas
        # Under plain FSDP no replica holds a rank's shard: its neighbour keeps a copy (made with the optimizer).
        self.copies: shard_copies.NeighbourCopies | ReplayedCopies | None = None
        self._settling: tuple[int, dict[int, shard_copies.Holding]] | None = None  # a re-form's step and holdings
        self.copy_every = copy_every
        self._ctx = ctx
        self.reshard_after_forward = reshard_after_forward
        self._build, self._make_optimizer, self._units = build, make_optimizer, units
        self._model: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._sharded: dict[str, nn.Parameter] = {}  # the model's sharded parameters, by name
        self._world = 0  # the number of ranks the model is sharded over
        self._mesh: Any = None  # the mesh it is sharded over
        self._idle: nn.Module | None = None  # the model, let go of its group at a release, to move onto the next
        self._kept: KeptShard | None = None
        if not ctx.joined:  # a joiner builds its model when it joins (restore), and froze its heap as a spare
            generations.freeze_heap()
            self._model = self._shard(build(), fsdp.mesh_for(ctx, replicas))
            self._optimizer = make_optimizer(self._model)
            self._keep_copies(self._optimizer)

    @property
    def model(self) -> nn.Module:
        if self._model is None:
            raise RuntimeError("the sharded model is being re-formed")
        return self._model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        if self._optimizer is None:
            raise RuntimeError("a joiner's optimizer is made when it joins")
        return self._optimizer

    def wrap(self, ctx: DistContext) -> nn.Module:
        return self.model

    def release(self) -> None:
        if self._model is None or self._optimizer is None:
            return  # nothing built since the last release
        optimizer = self._optimizer
        kept = shard_of(self._sharded, optimizer, self._world, dict(self._model.named_buffers()))
        for group in optimizer.param_groups:
            group["params"] = []
        optimizer.state.clear()
        self._idle = self._model if sharded_rebind.let_go(self._model, self._mesh) else None
        if self._idle is None:
            self._sharded, self._mesh = {}, None
            print("torchjob: its sharded model is built anew at the re-form: FSDP2 could not let go of it", flush=True)
        self._model, self._kept = None, kept

    def before_step(self, ctx: DistContext, step: int) -> None:
        if isinstance(self.copies, ReplayedCopies):
            self.copies.begin_step()

    def after_step(self, ctx: DistContext, step: int) -> None:
        """Under plain FSDP: the neighbours' copies of every shard as of ``step``: sent whole where one is missing
        (replayed copies, stepped in the optimizer's step otherwise), or every ``copy_every`` steps and at the
        first step after a re-form (every member alike)."""
        copies = self.copies
        if copies is None or self._model is None or ctx.world_size < 2:
            return
        if isinstance(copies, ReplayedCopies):
            if copies.boundary(step):
                copies.seed(ctx, self._shard_now(), step)
        elif copies.due or step % self.copy_every == 0:
            copies.refresh(ctx, self._shard_now(), step)

    def _shard_now(self) -> KeptShard:
        assert self._model is not None
        return shard_of(self._sharded, self.optimizer, self._world, dict(self._model.named_buffers()))

    def _keep_copies(self, optimizer: torch.optim.Optimizer) -> None:
        """Under plain FSDP, once the optimizer is made: its neighbour's copy of this rank's shard, stepped as the
        live shard steps where the optimizer's step can be replayed on it and the copy is kept every step
        (replayed_copies.py), sent whole every ``copy_every`` steps otherwise (shard_copies.py)."""
        if self.replicas > 1 or self.copies is not None:
            return
        if self.copy_every == 1 and copy_replay.replayable(optimizer):
            self.copies = ReplayedCopies(type(optimizer))
            optimizer.register_step_pre_hook(self._before_optimizer_step)
            optimizer.register_step_post_hook(self._after_optimizer_step)
        else:
            self.copies = shard_copies.NeighbourCopies()

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        copies = self.copies
        if not isinstance(copies, ReplayedCopies) or self._model is None:
            return
        grouped = {id(p) for group in optimizer.param_groups for p in group["params"]}
        grads = {n: local(p.grad) for n, p in self._sharded.items() if p.grad is not None and id(p) in grouped}
        grows = any(not optimizer.state.get(self._sharded[name]) for name in grads)
        options = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
        copies.before_step(self._ctx, grads, dict(self._model.named_buffers()), options, grows)

    def _after_optimizer_step(self, *_: Any) -> None:
        if isinstance(self.copies, ReplayedCopies) and self._model is not None:
            self.copies.after_optimizer_step()

    def restore(self, ctx: DistContext, has_state: bool, step: int) -> Restored:
        kept = self._kept
        if has_state and kept is not None and kept.world != ctx.world_size:
            raise ShardedRepairError(
                f"the group re-formed with {ctx.world_size} ranks, its model was sharded over {kept.world}: a sharded "
                "model is repaired in place only in a group of the same size"
            )
        self._ctx = ctx
        if self.replicas > 1:
            shards = ctx.world_size // self.replicas
            live = step
            holders, step = _holders(ctx, has_state, step, shards)
            if has_state and ctx.rank not in holders:
                has_state = False  # at another step than the group: its shard comes from a holder, as of theirs
                way = "back" if live > step else "on"
                print(
                    f"torchjob: rank {ctx.rank}: {way} to step {step} from {live}, the step its peers hold", flush=True
                )
            senders = _senders(holders, ctx.world_size, shards)
            reporter = min(holders)
        else:
            live = self.copies.live_step(step) if has_state and self.copies is not None else -1
            step, senders, reporter = self._from_copies(ctx, live)
        mesh = fsdp.mesh_for(ctx, self.replicas)
        # A holder sends what it holds while it moves or builds its model (nothing of it is needed to send), and a
        # joiner receives it while it builds its own (into tensors of its own, copied into the model's after).
        outgoing = None
        if state_transfer.sends(ctx.rank, senders):
            assert self.replicas > 1 or self.copies is not None
            outgoing = kept if self.copies is None else self.copies.copy_of(step)
        incoming = None if has_state else state_transfer.receive_started(senders[ctx.rank], ctx.device, what="shard")
        with state_transfer.sending(ctx, senders, outgoing):
            moved = self._moved(ctx, mesh)
            model = moved or self._built(ctx, mesh)
            new_buffers = dict(model.named_buffers())
            if has_state and self.copies is not None and live > step:
                kept = self._gone_back(ctx, kept, step)  # after its sends began: they are of the copy, not of this
            elif has_state and self.copies is not None and live < step:
                kept = self._stepped_on(ctx, kept, step)
            if incoming is not None:
                kept = incoming()
            assert kept is not None
            if incoming is not None or moved is None:  # a model moved holds its own kept shard already
                with torch.no_grad():
                    for name, param in self._sharded.items():
                        local(param).copy_(kept.params[name])
                    for name, buffer in new_buffers.items():
                        buffer.copy_(kept.buffers[name])
        if self._optimizer is None:
            self._optimizer = self._make_optimizer(model)
            self._keep_copies(self._optimizer)
        if isinstance(self.copies, ReplayedCopies):
            assert self._settling is not None
            self.copies.settle(ctx, *self._settling)
        elif self.copies is not None:
            self.copies.reset()
        self._settling = None
        _attach(self._optimizer, self._sharded, kept)
        self._model, self._kept = model, None
        return Restored(model, reporter, step, state_transfer.said(senders, "shard", copies=self.replicas == 1))

    def _built(self, ctx: DistContext, mesh: Any) -> nn.Module:
        """``build()`` on the meta device, sharded over ``mesh``, given (uninitialised) memory on this rank's
        device. build() may seed torch's generator: the survivors' random state must go on as if nothing
        happened."""
        devices = [ctx.device.index] if ctx.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.device("meta"):
            built = self._build()
        model = self._shard(built, mesh)
        model.to_empty(device=ctx.device)
        return model

    def _moved(self, ctx: DistContext, mesh: Any) -> nn.Module | None:
        """The model let go of at the release, moved onto ``mesh``'s groups (sharded_rebind.py), where this member
        holds the same place in it (a joiner has none; a survivor whose rank changed builds anew)."""
        idle, self._idle = self._idle, None
        if idle is None:
            return None
        if not sharded_rebind.rebind(idle, self._mesh, mesh):
            print(
                f"torchjob: rank {ctx.rank}: its sharded model is built anew: its place in the mesh changed", flush=True
            )
            return None
        return idle

    def _from_copies(self, ctx: DistContext, live: int) -> tuple[int, dict[int, list[int]], int]:
        """Under plain FSDP: the step the group carries on from (shard_copies.agree), each joiner's keeper, and the
        reporter. A member whose live shard is of a later step goes back to it (``_gone_back``), of an earlier one
        steps on to it (``_stepped_on``)."""
        mine = self.copies.holding(live) if self.copies is not None else shard_copies.Holding(-1, -1, -1, -1)
        table = state_transfer.gathered(ctx, mine.steps())
        holdings = {rank: shard_copies.Holding(*row) for rank, row in enumerate(table)}
        try:
            step, keepers = shard_copies.agree(holdings, ctx.world_size, ctx.local_world_size)
        except shard_copies.CopyError as error:
            raise ShardedRepairError(f"{error}; the group restarts from its checkpoint") from None
        self._settling = step, holdings
        reporter = min(rank for rank, holding in holdings.items() if holding.live >= 0)
        return step, {joiner: [keeper] for joiner, keeper in keepers.items()}, reporter

    def _gone_back(self, ctx: DistContext, kept: KeptShard | None, step: int) -> KeptShard:
        """This member's shard as of ``step``: its own shard as of the last exchange, copied (the optimizer takes
        these tensors as its state), into its live shard's tensors where it has them (no allocation). Done once
        a keeper's sends have begun (the joiner waits for those bytes; going back costs every survivor 0.1 s of
        CPU on the shared cores, by hand)."""
        copies = self.copies
        assert isinstance(copies, shard_copies.NeighbourCopies) and copies.own is not None and copies.own_step == step
        own = copies.own
        print(f"torchjob: rank {ctx.rank}: back to step {step}, the step its lost peer's copy is of", flush=True)
        return copied_into(kept, own) if kept is not None and shapes_of(kept) == shapes_of(own) else cloned(own)

    def _stepped_on(self, ctx: DistContext, kept: KeptShard | None, step: int) -> KeptShard:
        """This member's shard stepped on to ``step`` with its own gradients of it (replayed_copies.py): it failed
        in the exchange that ends before any rank steps, after every rank had received its neighbour's gradients,
        and a peer stepped."""
        copies = self.copies
        assert isinstance(copies, ReplayedCopies) and kept is not None
        print(f"torchjob: rank {ctx.rank}: on to step {step}, the step its peers stepped to", flush=True)
        copy_replay.replay(kept, copies.own_gradients(), copies.kind, kept.options)
        return kept

    def _shard(self, model: nn.Module, mesh: Any) -> nn.Module:
        units = list(self._units(model)) if self._units is not None else None
        fsdp.shard_on(model, mesh, units, self.reshard_after_forward)
        self._sharded = dict(model.named_parameters())  # sharded now, before any forward gathers them
        self._world, self._mesh = int(mesh.size()), mesh
        return model


def _holders(ctx: DistContext, has_state: bool, step: int, shards: int) -> tuple[dict[int, int], int]:
    """Which ranks hold their shard at the step the group carries on from, and that step (one all-gather of
    two integers); every rank raises alike when the group cannot be made whole."""
    table = state_transfer.gathered(ctx, (int(has_state), step))
    return _agreed({rank: row[1] for rank, row in enumerate(table) if row[0]}, shards)


def _agreed(live: dict[int, int], shards: int) -> tuple[dict[int, int], int]:
    """From each survivor's step (``live``), the newest step at which some survivor holds every shard, and the
    survivors that hold theirs at it. A survivor that completed a step its peers failed (its collectives had
    ended before the loss reached them) is a step ahead: its replica peer holds its shard as of the step
    before, so it takes that, as a joiner would."""
    if not live:
        raise ShardedRepairError("no member of the re-formed group holds its shard of the model")
    every = set(range(shards))
    missing = every - {rank % shards for rank in live}
    if missing:
        raise _every_copy_lost(min(missing))
    for step in sorted(set(live.values()), reverse=True):
        holders = {rank: at for rank, at in live.items() if at == step}
        if {rank % shards for rank in holders} == every:
            return holders, step
    steps = ", ".join(map(str, sorted(set(live.values()))))
    raise ShardedRepairError(
        f"the survivors stopped at different steps ({steps}) and no step has every shard held by one of them; "
        "the group restarts from its checkpoint"
    )


def _senders(holders: dict[int, int], world: int, shards: int) -> dict[int, list[int]]:
    """For each joiner, the holders of its shard (the same shard index in every other replica group)."""
    senders: dict[int, list[int]] = {}
    for joiner in range(world):
        if joiner in holders:
            continue
        found = [rank for rank in sorted(holders) if rank % shards == joiner % shards]
        if not found:
            raise _every_copy_lost(joiner % shards)
        senders[joiner] = found
    return senders


def _attach(optimizer: torch.optim.Optimizer, sharded: dict[str, nn.Parameter], kept: KeptShard) -> None:
    """Point ``optimizer`` at the new model's parameters, with the state ``kept`` holds, laid out on the new
    mesh."""
    if len(kept.groups) != len(optimizer.param_groups):
        raise ShardedRepairError(
            f"make_optimizer made {len(optimizer.param_groups)} parameter groups, the group's optimizer has "
            f"{len(kept.groups)}"
        )
    for group, names, options in zip(optimizer.param_groups, kept.groups, kept.options, strict=True):
        group.update(options)
        group["params"] = [sharded[name] for name in names]
    optimizer.state.clear()
    for name, state in kept.optimizer.items():
        param: Any = sharded[name]  # a DTensor
        placed = dict(state)
        for key in kept.sharded_keys.get(name, []):
            placed[key] = DTensor.from_local(
                state[key],
                param.device_mesh,
                param.placements,
                run_check=False,
                shape=param.shape,
                stride=param.stride(),
            )
        optimizer.state[param] = placed


def _every_copy_lost(shard: int) -> ShardedRepairError:
    return ShardedRepairError(
        f"no survivor holds shard {shard} (every replica group lost that rank at once); the group restarts from "
        "its checkpoint"
    )
