"""Host networks. A host is a stack of segments with a slot between consecutive segments.

The host declares its slots (`slot_ids`, in host order) and the activation width at each
(`slot_dims`); the model, the controller's masks and the reports all derive from these.
`host.forward` runs the segments back to back: the same network with no slots at all.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from esper.kasmina.blueprints import MLP, CausalSelfAttention, Topology
from esper.kasmina.width import (
    Inflow,
    ParamMerge,
    WidenableSegment,
    Widening,
    WidthSite,
    concatenated,
    fresh_like,
    weight_only,
)
from esper.leyline.slots import SlotId, slot_names_for


class Host(nn.Module):
    """A network cut into `n_slots + 1` segments; slot i sits after segment i."""

    topology: Topology

    def __init__(self, segments: list[nn.Module], slot_dims: list[int]) -> None:
        super().__init__()
        if len(segments) != len(slot_dims) + 1:
            raise ValueError("a host needs exactly one more segment than slots")
        self.segments = nn.ModuleList(segments)
        self.slot_dims: tuple[int, ...] = tuple(slot_dims)
        self.slot_ids: tuple[SlotId, ...] = tuple(
            SlotId(i, name) for i, name in enumerate(slot_names_for(len(slot_dims)))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for segment in self.segments:
            x = segment(x)
        return x

    def width_site(self, index: int) -> WidthSite | None:
        """The layer pair a width seed in slot `index` widens (in the segment before the slot),
        or None when that segment has none."""
        segment = self.segments[index]
        return segment.width_site if isinstance(segment, WidenableSegment) else None

    def merge_width(self, index: int, seed: nn.Module, alpha: float) -> list[ParamMerge]:
        """Concatenate the width seed of slot `index` into the host's tensors (outputs unchanged)."""
        segment = self.segments[index]
        assert isinstance(segment, WidenableSegment)  # a slot has a width site only then
        return segment.merge(seed, alpha)


CNN_POOLED_BLOCKS = 3
"""The first three blocks halve the resolution (16x16 -> 2x2, 32x32 -> 4x4); deeper blocks keep it."""


class ConvBlock(nn.Sequential):
    """conv-BN-ReLU-conv-BN-ReLU (then a 2x2 max-pool): a VGG block. A width seed in the slot
    after it widens the whole block (`ConvWidthSeed`): the first convolution's output channels
    (the pair's hidden units) and the second's (the block's output, which the next segment reads
    through an `Inflow` until the merge)."""

    def __init__(self, c_in: int, c_out: int, pool: bool) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(),
        ]
        if pool:
            layers.append(nn.MaxPool2d(2))
        super().__init__(*layers)

    def forward(self, x: torch.Tensor, widening: Widening | None = None, inflow: Inflow | None = None) -> torch.Tensor:
        if widening is None and inflow is None:
            return super().forward(x)
        z = self[0](x)
        if inflow is not None:
            z = inflow(z)
        a = self[2](self[1](z))
        y = self[3](a)
        if widening is not None:
            y = widening(x, a, y)
        for layer in list(self)[4:]:
            y = layer(y)
        return y

    @property
    def width_site(self) -> WidthSite:
        return WidthSite(self[0].in_channels, self[0].out_channels, self[3].out_channels, pooled=len(self) > 6)

    def merge(self, seed: nn.Module, alpha: float) -> list[ParamMerge]:
        """Concatenate a `ConvWidthSeed`'s channels into this block: `units` more hidden and
        output channels (the seed's `conv_out`, into the old outputs, scaled by `alpha`)."""
        site, k = self.width_site, seed.units
        conv_in, norm_in, conv_out, norm_out = self._layers(site.in_dim, site.hidden + k, site.out_dim + k)
        partial = self._layers(site.in_dim, site.hidden + k, site.out_dim)[2]  # old outputs, all hidden inputs
        merges = concatenated(self[0], conv_in, seed.conv_in, dim=0)
        merges += concatenated(self[1], norm_in, seed.norm_in, dim=0)
        merges += concatenated(self[3], partial, seed.conv_out, dim=1, scale=alpha)
        merges += concatenated(partial, conv_out, seed.conv_new, dim=0)
        merges += concatenated(self[4], norm_out, seed.norm_new, dim=0)
        self[0], self[1], self[3], self[4] = conv_in, norm_in, conv_out, norm_out
        return merges

    def merge_inflow(self, next_in: nn.Module, alpha: float) -> list[ParamMerge]:
        """The previous block's seed's new channels become input channels of the first convolution."""
        site = self.width_site
        conv_in = self._layers(site.in_dim + next_in.in_channels, site.hidden, site.out_dim)[0]
        merges = concatenated(self[0], conv_in, next_in, dim=1, scale=alpha)
        self[0] = conv_in
        return merges

    def get_extra_state(self) -> dict[str, int]:
        site = self.width_site
        return {"in": site.in_dim, "hidden": site.hidden, "out": site.out_dim}

    def set_extra_state(self, state: dict[str, int]) -> None:
        """A merged (wider) block is rebuilt at its widths before its tensors are loaded."""
        site = self.width_site
        widths = (state.get("in", site.in_dim), state["hidden"], state.get("out", site.out_dim))
        if widths != (site.in_dim, site.hidden, site.out_dim):
            self[0], self[1], self[3], self[4] = self._layers(*widths)

    def _layers(self, c_in: int, hidden: int, c_out: int) -> tuple[nn.Module, ...]:
        """Fresh conv, BatchNorm, conv, BatchNorm of the given widths (values to be overwritten)."""
        ref = self[0]
        return tuple(
            fresh_like(ref, build)
            for build in (
                lambda: nn.Conv2d(c_in, hidden, 3, padding=1, bias=False),
                lambda: nn.BatchNorm2d(hidden),
                lambda: nn.Conv2d(hidden, c_out, 3, padding=1, bias=False),
                lambda: nn.BatchNorm2d(c_out),
            )
        )


class ClassifierHead(nn.Sequential):
    """Global average pool, then a Linear classifier: the CNN's last segment. A width seed in the
    last block's slot feeds it new features through an `Inflow` until its merge adds them as
    input columns."""

    def __init__(self, c_in: int, num_classes: int) -> None:
        super().__init__(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, num_classes))

    def forward(self, x: torch.Tensor, inflow: Inflow | None = None) -> torch.Tensor:
        logits = super().forward(x)
        return logits if inflow is None else inflow(logits)

    def merge_inflow(self, next_in: nn.Module, alpha: float) -> list[ParamMerge]:
        linear = self[2]
        features = linear.in_features + next_in.in_features
        wider = fresh_like(linear, lambda: nn.Linear(features, linear.out_features))
        merges = concatenated(weight_only(linear), wider, next_in, dim=1, scale=alpha)
        wider.bias = linear.bias
        self[2] = wider
        return merges

    def get_extra_state(self) -> dict[str, int]:
        return {"in": self[2].in_features}

    def set_extra_state(self, state: dict[str, int]) -> None:
        linear = self[2]
        if state["in"] != linear.in_features:
            self[2] = fresh_like(linear, lambda: nn.Linear(state["in"], linear.out_features))


class CNNHost(Host):
    """VGG-style CNN: `depth` blocks of two 3x3 convolutions, a slot after every block.

    Block i has width * 2**min(i, 2) channels, so a 3-block host has slots of width w, 2w, 4w.
    """

    topology = Topology.CNN

    def __init__(self, in_channels: int = 3, num_classes: int = 10, width: int = 16, depth: int = 3) -> None:
        if depth < 1 or width < 1:
            raise ValueError(f"CNNHost needs depth >= 1 and width >= 1, got depth={depth}, width={width}")
        widths = [width * 2 ** min(i, 2) for i in range(depth)]
        blocks: list[nn.Module] = []
        c_in = in_channels
        for i, c in enumerate(widths):
            blocks.append(ConvBlock(c_in, c, pool=i < CNN_POOLED_BLOCKS))
            c_in = c
        super().__init__([*blocks, ClassifierHead(c_in, num_classes)], widths)

    def width_site(self, index: int) -> WidthSite | None:
        """Block `index`'s site, with the first layer of the segment after it, which the seed feeds."""
        site, following = super().width_site(index), self.segments[index + 1]
        if site is None:
            return None
        if isinstance(following, ConvBlock):
            return replace(site, next_dim=following.width_site.hidden)
        return replace(site, next_dim=following[2].out_features, next_is_conv=False)

    def merge_width(self, index: int, seed: nn.Module, alpha: float) -> list[ParamMerge]:
        """The block's merge, then the next segment's new input columns."""
        return self.segments[index].merge(seed, alpha) + self.segments[index + 1].merge_inflow(seed.next_in, alpha)


class TransformerBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.attn, self.mlp = CausalSelfAttention(d), MLP(d)

    def forward(self, x: torch.Tensor, widening: Widening | None = None) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.mlp(x, widening)


class TransformerGroup(nn.Sequential):
    """Consecutive transformer blocks (the first group starts with the embedding); the last
    block's MLP is the layer pair a width seed widens."""

    def forward(self, x: torch.Tensor, widening: Widening | None = None) -> torch.Tensor:
        if widening is None:
            return super().forward(x)
        layers = list(self)
        for layer in layers[:-1]:
            x = layer(x)
        return layers[-1](x, widening)

    @property
    def width_site(self) -> WidthSite:
        return self[-1].mlp.width_site

    def merge(self, seed: nn.Module, alpha: float) -> list[ParamMerge]:
        return self[-1].mlp.merge(seed, alpha)


class Embedding(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, d: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab_size, d), nn.Embedding(block_size, d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))


class LMHead(nn.Module):
    def __init__(self, d: int, vocab_size: int) -> None:
        super().__init__()
        self.norm, self.out = nn.LayerNorm(d), nn.Linear(d, vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


class TransformerHost(Host):
    """GPT-style decoder: `n_layer` pre-norm blocks in `n_slots` equal groups, a slot after each group."""

    topology = Topology.TRANSFORMER

    def __init__(
        self, vocab_size: int = 256, block_size: int = 64, d_model: int = 64, n_layer: int = 3, n_slots: int = 3
    ) -> None:
        if n_slots < 1 or n_layer % n_slots:
            raise ValueError(f"n_layer ({n_layer}) must be a positive multiple of n_slots ({n_slots})")
        per_group = n_layer // n_slots
        groups: list[nn.Module] = []
        for g in range(n_slots):
            layers = [TransformerBlock(d_model) for _ in range(per_group)]
            if g == 0:
                layers.insert(0, Embedding(vocab_size, block_size, d_model))
            groups.append(TransformerGroup(*layers))
        super().__init__([*groups, LMHead(d_model, vocab_size)], [d_model] * n_slots)
        self.block_size = block_size
