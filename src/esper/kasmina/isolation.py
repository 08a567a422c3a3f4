"""Gradient routing between a host stream and its seed."""

from __future__ import annotations

import torch


def straight_through(host: torch.Tensor, seed_delta: torch.Tensor) -> torch.Tensor:
    """Return exactly `host` in value while the seed receives the gradient of `host + seed_delta`.

    `d - d.detach()` is exactly zero for finite values, so the output equals the host's bit for bit.
    Under autocast the seed may compute in a lower precision than the host stream; the delta is
    cast to the host's dtype first, so the output keeps the host's dtype and the zero stays exact.
    """
    seed_delta = seed_delta.to(host.dtype)
    return host + (seed_delta - seed_delta.detach())
