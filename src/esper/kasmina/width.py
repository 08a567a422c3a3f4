"""Widening a host layer pair: where a width seed adds units, and how it merges in.

A widenable *layer pair* is `out(act(in(u)))` inside a host segment: a transformer MLP's `fc`
(GELU) feeding its `proj`, or a CNN block's first convolution (BatchNorm, ReLU) feeding its
second. A width seed adds `k` hidden units: its own rows of `in` (random, so the new units are
alive), its own normalisation, and columns of `out` that start at zero, so the segment's output
is unchanged when the seed is germinated. (Zero *incoming* weights behind a ReLU would receive
no gradient at all; zero *outgoing* weights receive the gradient of the units' activations at
once.)

A CNN block's output is the stream every later layer reads, and on the shapes task that stream
width is what pays (`experiments/growth-frontier/README.md`). So a CNN width seed widens
the whole block: `k` hidden channels and `k` output channels (random rows of the second
convolution reading every hidden channel, old and new, with their own BatchNorm), and `k` input
columns of the next segment's first layer (the next block's first convolution, or the
classifier), which start at zero. The new output channels reach the next segment through an
*inflow* (`Inflow`), so the stream between the segments keeps the host's width until the merge.

When a width seed fossilizes it is merged: each tensor it widens is concatenated with the
seed's (the seed's outgoing weights scaled by its alpha), the host holds plain layers of the
wider size, and the seed's optimizer state joins the host's (`ModelOptimizers.merge_seed`).
A seed built before a neighbouring slot's merge widened a layer it reads or feeds is narrower
than that layer on one side: it reads the input channels it was built on, and the merge pads
it with zeros there (`concatenated`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import nn

Widening = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""`(u, a, y) -> y'`: the host pair's output `y` with a width seed's units added, given the
pair's input `u` and its hidden activations `a`. A widenable segment calls it where its pair's
output is formed."""

Inflow = Callable[[torch.Tensor], torch.Tensor]
"""`z -> z'`: the pre-activation `z` of a segment's first layer with the contribution of the new
output channels of a width seed in the segment before (a CNN block seed's `to_next`)."""


@dataclass(frozen=True)
class WidthSite:
    """A host layer pair that a width seed can widen: the width of the pair's input, hidden
    units and output. The host declares one per slot (the pair in the segment before the slot)."""

    in_dim: int
    hidden: int
    out_dim: int
    next_dim: int = 0
    """Outputs of the next segment's first layer, for a seed that widens the pair's output too
    (a CNN block); 0 when the output keeps its width (a transformer MLP writes the residual stream)."""
    pooled: bool = False
    """Whether the segment max-pools its output (a CNN block's new output channels are pooled alike)."""
    next_is_conv: bool = True
    """Whether the next segment's first layer is a 3x3 convolution (else the classifier's Linear,
    after global average pooling)."""


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


def fitted(seed_tensor: torch.Tensor, shape: torch.Size, dim: int) -> torch.Tensor:
    """`seed_tensor` padded with zeros at the end of every dimension but `dim` to `shape`: a seed
    built before a neighbour's merge widened the layer it joins is narrower there."""
    pad: list[int] = []
    for d in reversed(range(seed_tensor.ndim)):
        extra = 0 if d == dim else shape[d] - seed_tensor.shape[d]
        if extra < 0:
            raise ValueError(f"a seed tensor {tuple(seed_tensor.shape)} is wider than its layer {tuple(shape)}")
        pad += [0, extra]
    return torch.nn.functional.pad(seed_tensor, pad) if any(pad) else seed_tensor


def concatenated(old: nn.Module, wider: nn.Module, seed: nn.Module, dim: int, scale: float = 1.0) -> list[ParamMerge]:
    """Fill `wider` (a fresh module of the merged size) with `old`'s tensors followed by `seed`'s
    along `dim` (`fitted` to `old`'s other dimensions): parameters become new `nn.Parameter`s
    (reported as merges), BatchNorm running statistics are concatenated, and the batch counter is
    the host's."""
    merges: list[ParamMerge] = []
    seed_params = dict(seed.named_parameters())
    for name, old_param in old.named_parameters():
        seed_part = fitted(scale * seed_params[name].detach(), old_param.shape, dim)
        new = nn.Parameter(torch.cat([old_param.detach(), seed_part], dim))
        setattr(wider, name, new)
        merges.append(ParamMerge(old_param, new, seed_params[name], scale, dim))
    seed_buffers = dict(seed.named_buffers())
    for name, buffer in old.named_buffers():
        merged = buffer if buffer.ndim == 0 else torch.cat([buffer, seed_buffers[name]], dim)
        setattr(wider, name, merged.detach().clone())
    return merges


def fresh_like(reference: nn.Module, build: Callable[[], nn.Module]) -> nn.Module:
    """A module built by `build` like `reference` (the layer it replaces): on its device and
    dtype, in its train or eval mode, and without touching the global RNG, since its values are
    overwritten right after (by a merge, or by a state dict being loaded)."""
    tensor = next(reference.parameters())
    with torch.random.fork_rng(devices=[]):
        return build().to(device=tensor.device, dtype=tensor.dtype).train(reference.training)


def weight_only(layer: nn.Module) -> nn.Module:
    """A view of `layer` holding only its weight: the part of a layer with a bias that a merge
    concatenates (the bias belongs to the layer's outputs, which keep their number)."""
    view = nn.Module()
    view.weight = layer.weight
    return view
