"""A small GPT-style language model (decoder-only transformer) and the tokens it learns from, generated here.

Sizes: ``100m`` (12 layers, width 768, 16,384 tokens: about 110M parameters, 1.3 GB with Adam's state) is the
real-size case; ``1b`` (18 layers, width 2,048: 0.97B parameters, 15.6 GB with gradients and Adam's state) fits
one 24 GB machine only sharded over 4 ranks (``train.py``); ``tiny`` is the same code in a few thousand
parameters, for tests. Plain PyTorch.

The tokens come from a fixed random "language": a first-order Markov chain in which every token has
``SUCCESSORS`` likely next tokens. A model that learns it brings its loss from ln(vocabulary) towards
ln(``SUCCESSORS``), so training is visibly working, and nothing is downloaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SUCCESSORS = 4


@dataclass(frozen=True)
class Config:
    vocabulary: int
    width: int
    layers: int
    heads: int
    context: int
    learning_rate: float  # AdamW's, unless --lr says otherwise: smaller models take larger steps


SIZES = {
    # 18 layers, not 19 (1.02B): 4 ranks of 19 on 2 cores ran out of this machine's 24 GB loading a checkpoint.
    "1b": Config(vocabulary=16_384, width=2_048, layers=18, heads=16, context=256, learning_rate=1.5e-4),
    "100m": Config(vocabulary=16_384, width=768, layers=12, heads=12, context=256, learning_rate=3e-4),
    "small": Config(vocabulary=2_048, width=256, layers=4, heads=4, context=128, learning_rate=1e-3),
    "tiny": Config(vocabulary=256, width=64, layers=2, heads=2, context=32, learning_rate=3e-3),
}


class Block(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.heads = config.heads
        self.norm1 = nn.LayerNorm(config.width)
        self.attention = nn.Linear(config.width, 3 * config.width)
        self.projection = nn.Linear(config.width, config.width)
        self.norm2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(
            nn.Linear(config.width, 4 * config.width), nn.GELU(), nn.Linear(4 * config.width, config.width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.attention(self.norm1(x)).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.projection(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocabulary, config.width)
        self.positions = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocabulary, bias=False)

    def units(self) -> list[nn.Module]:
        """What FSDP shards one at a time: the token embedding, each block and the output head. The two vocabulary-
        sized matrices are units of their own, so that their gathered weights and gradients come and go as a
        block's do, not held through the whole step as the root's are."""
        return [self.tokens, *self.blocks, self.head]

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean cross-entropy of predicting each next token."""
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def parameters(config: Config) -> int:
    with torch.device("meta"):  # counted, not allocated
        return sum(p.numel() for p in GPT(config).parameters())


class Language:
    """The generated language: each token's ``SUCCESSORS`` likely next tokens, fixed by ``seed``."""

    def __init__(self, config: Config, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.config = config
        self.successors = torch.randint(config.vocabulary, (config.vocabulary, SUCCESSORS), generator=generator)

    def batch(self, size: int, step: int, rank: int, length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``size`` sequences of ``length`` tokens (default: the model's context) for ``rank`` at ``step`` (the
        same on every run: a resumed job sees the same data), as inputs and next-token targets."""
        generator = torch.Generator().manual_seed(step * 100_003 + rank)
        length = min(length or self.config.context, self.config.context) + 1
        sequence = torch.empty(size, length, dtype=torch.long)
        sequence[:, 0] = torch.randint(self.config.vocabulary, (size,), generator=generator)
        choices = torch.randint(SUCCESSORS, (size, length), generator=generator)
        for position in range(1, length):
            sequence[:, position] = self.successors[sequence[:, position - 1], choices[:, position]]
        return sequence[:, :-1], sequence[:, 1:]


def floor_loss() -> float:
    """The loss of a model that has learnt the language perfectly: ln(SUCCESSORS)."""
    return math.log(SUCCESSORS)
