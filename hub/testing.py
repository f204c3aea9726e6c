"""Checks every model family's tests share: gradients reach every parameter, a tiny batch overfits.

>>> model = torch.nn.Linear(4, 2)
>>> assert_overfits(model, lambda: torch.nn.functional.mse_loss(model(torch.ones(8, 4)), torch.zeros(8, 2)))
"""
from __future__ import annotations

from typing import Callable

import torch


def params_without_grad(model: torch.nn.Module) -> list[str]:
    """Names of trainable parameters that a backward pass did not reach (gradient ``None``).

    An exactly zero gradient is allowed: zero-initialised last norms of residual blocks give one at init.
    """
    return [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]


def assert_overfits(model: torch.nn.Module, loss_fn: Callable[[], torch.Tensor], steps: int = 60,
                    lr: float = 2e-3, ratio: float = 0.1) -> None:
    """Train ``model`` with Adam on the fixed batch inside ``loss_fn`` and assert the loss falls below
    ``ratio`` times its first value (a model that cannot memorise 8 samples is broken)."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    first = loss = None
    for _ in range(steps):
        loss = loss_fn()
        first = loss.item() if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < ratio * first, f"loss went from {first:.4g} to {loss.item():.4g} in {steps} steps"
