"""Gradient routing between a host stream and its seed."""

from __future__ import annotations

import torch


class _StraightThrough(torch.autograd.Function):
    """Forward: the host stream, untouched. Backward: the incoming gradient to both inputs."""

    @staticmethod
    def forward(ctx, host: torch.Tensor, seed_delta: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.seed_dtype = seed_delta.dtype
        return host.view_as(host)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        return grad, grad.to(ctx.seed_dtype)


def straight_through(host: torch.Tensor, seed_delta: torch.Tensor) -> torch.Tensor:
    """Return `host` exactly while the seed receives the gradient of `host + seed_delta`.

    Written as an autograd function rather than `host + (d - d.detach())`: the forward value is
    the host's whatever the seed computes (a seed that produces NaN or Inf while it trains in
    isolation cannot poison the model's output or loss), and the gradient reaching the seed is
    cast to the seed's own dtype, so it is safe under autocast where the seed computes in a
    lower precision than the host stream.
    """
    return _StraightThrough.apply(host, seed_delta)
