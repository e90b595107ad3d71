"""`lm`: a one-block causal transformer language model over a tiny vocabulary.

Its failure surface: the input embedding and the output head share one weight (tied weights:
`embed.weight` and `head.weight` are the same tensor, which ZeRO-3 partitioning and state-dict
consolidation must keep one), LayerNorms, attention with a causal mask, and a 3-d output
(batch x position x vocab) to gather. Trained with SGD + momentum and a cosine schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task, TaskOutput


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        # (batch, heads, length, head_dim); written out rather than a fused kernel so that every
        # backend runs the same arithmetic.
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        attention = scores.float().masked_fill(causal, float("-inf")).softmax(dim=-1).to(v.dtype)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(batch, length, dim))
        return x + self.mlp(self.norm2(x))


class Positions(nn.Module):
    """Learnt absolute positions. A module of its own on purpose: owned by the root module, the
    same parameter fails under ZeRO-3 (the `root_param` task shows why); here it trains."""

    def __init__(self, length: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(0.02 * torch.randn(length, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight[: x.shape[1]]


class TinyLM(nn.Module):
    def __init__(self, vocab: int, length: int, dim: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        # Embedding's default N(0, 1) makes the tied head's first logits huge (loss ~13 for a
        # vocabulary of 24): a chaotic start that would amplify rounding, not test backends.
        nn.init.normal_(self.embed.weight, std=0.1)
        self.position = Positions(length, dim)
        self.block = Block(dim, heads)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        hidden = self.block(self.position(self.embed(input_ids)))
        logits = self.head(self.norm(hidden))
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
        return TaskOutput(loss=loss, logits=logits)


@dataclass(frozen=True, kw_only=True)
class LMTask(Task):
    name: str = "lm"
    seed: int = 2024
    train_size: int = 48
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    epochs: int = 2
    inject_overflow_step: int | None = 4
    vocab: int = 24
    length: int = 8
    dim: int = 16
    heads: int = 2
    lr: float = 0.2

    def _make_model(self) -> nn.Module:
        return TinyLM(self.vocab, self.length, self.dim, self.heads)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9)

    def _make_scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.steps, eta_min=0.01)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        # Sequences that count up by a per-sequence stride modulo the vocabulary: learnable from
        # the first two tokens, so the loss falls visibly within a few steps.
        start = torch.randint(0, self.vocab, (size, 1), generator=generator)
        stride = torch.randint(1, 4, (size, 1), generator=generator)
        tokens = (start + stride * torch.arange(self.length + 1)) % self.vocab
        return {"input_ids": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous()}
