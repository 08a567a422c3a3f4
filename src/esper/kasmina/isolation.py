"""Gradient routing between a host stream and its seed."""

from __future__ import annotations

from typing import Any

import torch


class _StraightThrough(torch.autograd.Function):
    """Forward: a copy of the host stream. Backward: the incoming gradient to both inputs."""

    @staticmethod
    def forward(host: torch.Tensor, seed_delta: torch.Tensor) -> torch.Tensor:
        # A copy, not a view: later in-place ops on the stream (an inplace ReLU) stay legal.
        return host.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor], output: torch.Tensor) -> None:
        """Nothing to save; defined separately from forward so torch.func transforms apply."""

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # autograd casts each gradient to its input's dtype, so a bf16 seed gets a bf16 gradient
        return grad, grad


def straight_through(host: torch.Tensor, seed_delta: torch.Tensor) -> torch.Tensor:
    """Return `host` exactly while the seed receives the gradient of `host + seed_delta`.

    Written as an autograd function rather than `host + (d - d.detach())`: the forward value is
    the host's whatever the seed computes, so a seed that produces NaN or Inf while it trains in
    isolation cannot poison the model's output or loss. Under autocast the seed may compute in a
    lower precision than the host stream; the output keeps the host's dtype and the seed's
    gradient arrives in the seed's dtype.
    """
    return _StraightThrough.apply(host, seed_delta)
