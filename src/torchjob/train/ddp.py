"""Wrapping a model in DDP, and proving the ranks really train one model.

The classic silent bug: a model never wrapped in DistributedDataParallel (or sharded: ``torchjob.train.fsdp``)
trains N separate models — each rank on its own shard of the data — and nothing fails. ``SyncCheck`` gathers a
cheap checksum of the parameters from every rank after the first optimizer step (and every N steps if asked) and
raises ``OutOfSyncError`` when they differ.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from torchjob.train.context import DistContext


class OutOfSyncError(RuntimeError):
    """Ranks hold different parameters: they are not training one model."""


# Gradients kept in DDP's all-reduce buckets, not copied into them and back after every backward: two copies of
# the model's gradients a step saved (0.6 s a step of the 110M-parameter example over 4 ranks on 2 cores, 3.6 s ->
# 2.9 s), and their memory. What it forbids, ``grad.detach_()`` on a parameter, few scripts do; pass
# ``gradient_as_bucket_view=False`` to have DDP's own default.
DEFAULT_OPTIONS: dict[str, Any] = {"gradient_as_bucket_view": True}


def wrap(model: nn.Module, ctx: DistContext, **ddp_options: Any) -> DistributedDataParallel:
    """Move ``model`` to this rank's device and wrap it in DDP (which also broadcasts rank 0's weights), with
    ``DEFAULT_OPTIONS`` unless ``ddp_options`` says otherwise."""
    model = model.to(ctx.device)
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, **{**DEFAULT_OPTIONS, **ddp_options})


def checksum(model: nn.Module) -> torch.Tensor:
    """Two numbers per model: the sum of all parameters, and a position-weighted sum (catches swaps). A sharded
    parameter (a DTensor: ``torchjob.train.fsdp``) counts whole, gathered from its shards (a collective: every
    rank calls this), so that HSDP's replica groups, which must hold the same model, are compared."""
    total = torch.zeros(2, dtype=torch.float64)
    for i, param in enumerate(model.parameters(), start=1):
        whole = param.full_tensor() if isinstance(param, DTensor) else param
        values = whole.detach().to(dtype=torch.float64, device="cpu")
        s = values.sum()
        total[0] += s
        total[1] += s * i + (values.flatten()[:: max(1, values.numel() // 64)] * i).sum()
    return total


class SyncCheck:
    def __init__(self, model: nn.Module, ctx: DistContext, every: int | None = None, rtol: float = 1e-6) -> None:
        self.model = model
        self.ctx = ctx
        self.every = every
        self.rtol = rtol

    def after_step(self, step: int) -> None:
        """Call after each optimizer step (``step`` counts from 1): checks step 1, then every ``every``."""
        if step == 1 or (self.every and step % self.every == 0):
            self.verify(step)

    def verify(self, step: int) -> None:
        if not self.ctx.distributed:
            return
        local = checksum(self.model)
        gathered = [torch.zeros_like(local) for _ in range(self.ctx.world_size)]
        dist.all_gather(gathered, local)
        reference = gathered[0]
        scale = reference.abs().clamp_min(1.0)
        differing = [
            r for r, value in enumerate(gathered) if bool(((value - reference).abs() > self.rtol * scale).any())
        ]
        if differing:
            values = ", ".join(f"rank {r}: {float(v[0]):.6g}" for r, v in enumerate(gathered))
            raise OutOfSyncError(
                f"model parameters differ across ranks after step {step} ({values}): each rank is training its "
                "own copy of the model. Wrap it with torchjob.train.wrap() (DistributedDataParallel) or shard it "
                "with torchjob.train.shard_model() (FSDP2) so gradients are averaged, and build the optimizer from "
                "the wrapped model's parameters."
            )
