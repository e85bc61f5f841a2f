"""A copy stepped with the live shard's gradients (copy_replay.py) holds what the live shard holds, to the bit."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn

from torchjob.train.copy_replay import grows_state, replay, replayable
from torchjob.train.kept_shard import KeptShard, cloned, shard_of, tensors_of

Make = Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]

OPTIMIZERS: dict[str, Make] = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "adam-amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, weight_decay=0.01),
    "sgd-nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-3, momentum=0.5),
}


def _trained_step(model: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> dict[str, torch.Tensor]:
    """One step of ``model`` on a batch of its own; the gradients it stepped with, as the exchange sends them."""
    generator = torch.Generator().manual_seed(seed)
    optimizer.zero_grad()
    model(torch.randn(8, 16, generator=generator)).pow(2).mean().backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    optimizer.step()
    return grads


def _shard(model: nn.Module, optimizer: torch.optim.Optimizer) -> KeptShard:
    return shard_of(dict(model.named_parameters()), optimizer, 1, dict(model.named_buffers()))


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_a_copy_stepped_with_the_live_gradients_holds_the_live_shard_to_the_bit(kind: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = OPTIMIZERS[kind](model.parameters())
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)  # the learning rate moves
    _trained_step(model, optimizer, seed=0)  # a copy is sent whole once the optimizer has state
    schedule.step()
    copy = cloned(_shard(model, optimizer))
    options: list[dict[str, object]] = []
    for seed in range(1, 7):
        options = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
        grads = _trained_step(model, optimizer, seed)
        replay(copy, grads, type(optimizer), options)
        schedule.step()
    live = _shard(model, optimizer)
    assert len(tensors_of(copy)) == len(tensors_of(live)) > 4
    for kept, value in zip(tensors_of(copy), tensors_of(live), strict=True):
        assert torch.equal(kept, value)
    assert copy.options == options and options[0]["lr"] < optimizer.defaults["lr"]  # the last step's, scheduled


def test_a_step_that_would_make_state_the_copy_lacks_is_refused() -> None:
    model = nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters())
    empty = cloned(_shard(model, optimizer))  # before the first step: no moments yet
    grads = {name: torch.ones_like(p) for name, p in model.named_parameters()}
    assert grows_state(empty, grads)
    with pytest.raises(ValueError, match="send the shard whole instead"):
        replay(empty, grads, torch.optim.Adam, empty.options)


class _Clipped(torch.optim.SGD):
    """A subclass: its step may differ from SGD's."""


def test_only_elementwise_optimizers_of_their_own_class_are_replayed() -> None:
    params = list(nn.Linear(4, 2).parameters())
    assert replayable(torch.optim.AdamW(params)) and replayable(torch.optim.SGD(params, lr=0.1))
    assert not replayable(_Clipped(params, lr=0.1))
    assert not replayable(torch.optim.LBFGS(params))
