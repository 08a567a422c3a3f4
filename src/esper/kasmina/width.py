"""Widening a host layer pair: where a width seed adds hidden units, and how it merges in.

A widenable *layer pair* is `out(act(in(u)))` inside a host segment: a CNN block's first
convolution (with its BatchNorm and ReLU) feeding its second convolution, or a transformer
MLP's `fc` (GELU) feeding its `proj`. Its hidden units are the pair's width. A width seed is `k`
more hidden units: its own rows of `in` (random, so the new units are alive), its own
normalisation, and columns of `out` that start at zero, so the segment's output is unchanged
when the seed is germinated. (Zero *incoming* weights behind a ReLU would receive no gradient
at all; zero *outgoing* weights receive the gradient of the units' activations at once.)

When a width seed fossilizes it is merged: the pair's tensors are concatenated with the seed's
(the seed's `out` columns scaled by its alpha), the host holds plain layers of the wider size,
and the seed's optimizer state joins the host's (`ModelOptimizers.merge_seed`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import nn

Widening = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""`(u, y) -> y'`: the host pair's output `y` with a width seed's units added, given the pair's
input `u`. A widenable segment calls it where its pair's output is formed."""


@dataclass(frozen=True)
class WidthSite:
    """A host layer pair that a width seed can widen: the width of the pair's input, hidden
    units and output. The host declares one per slot (the pair in the segment before the slot)."""

    in_dim: int
    hidden: int
    out_dim: int


@runtime_checkable
class WidenableSegment(Protocol):
    """A host segment holding a layer pair a width seed can widen (`ConvBlock`, `TransformerGroup`)."""

    @property
    def width_site(self) -> WidthSite: ...

    def merge(self, seed: nn.Module, alpha: float) -> list[ParamMerge]: ...


@dataclass(frozen=True)
class ParamMerge:
    """One host parameter replaced by its concatenation with a seed's: `new` is
    `cat([old, scale * seed], dim)`. The optimizer carries `old`'s and `seed`'s state into `new`."""

    old: nn.Parameter
    new: nn.Parameter
    seed: nn.Parameter
    scale: float
    dim: int


def concatenated(old: nn.Module, wider: nn.Module, seed: nn.Module, dim: int, scale: float = 1.0) -> list[ParamMerge]:
    """Fill `wider` (a fresh module of the merged size) with `old`'s tensors followed by `seed`'s
    along `dim`: parameters become new `nn.Parameter`s (reported as merges), BatchNorm running
    statistics are concatenated, and the batch counter is the host's."""
    merges: list[ParamMerge] = []
    seed_params = dict(seed.named_parameters())
    for name, old_param in old.named_parameters():
        new = nn.Parameter(torch.cat([old_param.detach(), scale * seed_params[name].detach()], dim))
        setattr(wider, name, new)
        merges.append(ParamMerge(old_param, new, seed_params[name], scale, dim))
    seed_buffers = dict(seed.named_buffers())
    for name, buffer in old.named_buffers():
        merged = buffer if buffer.ndim == 0 else torch.cat([buffer, seed_buffers[name]], dim)
        setattr(wider, name, merged.detach().clone())
    return merges


def fresh_like(reference: torch.Tensor, build: Callable[[], nn.Module]) -> nn.Module:
    """A module built by `build` on `reference`'s device and dtype, without touching the global
    RNG: its values are overwritten right after (by a merge, or by a state dict being loaded)."""
    with torch.random.fork_rng(devices=[]):
        return build().to(device=reference.device, dtype=reference.dtype)
