"""One optimizer step applied to a kept shard, as the live optimizer applies it to its own (shard_copies.py).

A neighbour's copy of a rank's shard is kept current by receiving that rank's gradients and stepping the copy
with them, instead of receiving the whole shard again: a third of the bytes under Adam (weights and two moments
against one gradient), and no second copy of the shard to receive into. It is exact where the optimizer's step is
elementwise (each value of a parameter and of its state follows from the same values alone): the same kernels on
the same values give the same bits, the copy's as the live shard's (tests/train/test_copy_replay.py asserts it).
An optimizer that reduces over a whole parameter (a norm, a factored second moment: a collective under FSDP2) is
not, and neither is a subclass that may step differently: for those the whole shard is sent (``replayable``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch

from torchjob.train.kept_shard import KeptShard

# Elementwise steps, by exact class.
_ELEMENTWISE: tuple[type[torch.optim.Optimizer], ...] = (
    torch.optim.SGD,
    torch.optim.Adam,
    torch.optim.AdamW,
    torch.optim.Adagrad,
    torch.optim.Adadelta,
    torch.optim.Adamax,
    torch.optim.NAdam,
    torch.optim.RAdam,
    torch.optim.RMSprop,
    torch.optim.Rprop,
)


def replayable(optimizer: torch.optim.Optimizer) -> bool:
    """Whether a copy of ``optimizer``'s shard can be stepped as the optimizer steps it."""
    return type(optimizer) in _ELEMENTWISE


def grows_state(kept: KeptShard, grads: Mapping[str, Any]) -> bool:
    """Whether a step with these gradients would make state ``kept`` has none of yet (a parameter's first step):
    the copy's layout then changes, so it is sent whole again rather than stepped."""
    return any(name in grads and not kept.optimizer.get(name) for group in kept.groups for name in group)


def replay(
    kept: KeptShard, grads: Mapping[str, torch.Tensor], kind: type[torch.optim.Optimizer], options: list[dict[str, Any]]
) -> None:
    """Step ``kept`` in place with ``grads`` (by parameter name; a parameter without one is left as the optimizer
    leaves it) and each parameter group's ``options`` (its learning rate... as of this step), by an optimizer of
    class ``kind`` made over ``kept``'s tensors and state for this one step."""
    if grows_state(kept, grads):
        raise ValueError("a replayed step would make optimizer state the copy lacks: send the shard whole instead")
    if len(options) != len(kept.groups):
        raise ValueError(f"{len(options)} parameter groups' options for a shard of {len(kept.groups)}")
    groups = [
        {**dict(group_options), "params": [kept.params[name] for name in names]}
        for names, group_options in zip(kept.groups, options, strict=True)
    ]
    optimizer: torch.optim.Optimizer = cast(Any, kind)(groups)  # a class of _ELEMENTWISE: params, then options
    for names in kept.groups:
        for name in names:
            param = kept.params[name]
            param.grad = grads.get(name)
            if name in kept.optimizer:
                optimizer.state[param] = kept.optimizer[name]  # the same dict: what the step sets, the copy keeps
    try:
        with torch.no_grad():
            optimizer.step()
    finally:
        for names in kept.groups:
            for name in names:
                kept.params[name].grad = None
    kept.options = [dict(group_options) for group_options in options]
