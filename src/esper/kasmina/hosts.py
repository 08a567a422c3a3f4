"""Host networks. A host is a stack of segments with a slot between consecutive segments.

The host declares its slots (`slot_ids`, in host order) and the activation width at each
(`slot_dims`); the model, the controller's masks and the reports all derive from these.
`host.forward` runs the segments back to back: the same network with no slots at all.
"""

from __future__ import annotations

import torch
from torch import nn

from esper.kasmina.blueprints import MLP, CausalSelfAttention, Topology
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


CNN_POOLED_BLOCKS = 3
"""The first three blocks halve the resolution (16x16 -> 2x2, 32x32 -> 4x4); deeper blocks keep it."""


def _conv_block(c_in: int, c_out: int, pool: bool) -> nn.Sequential:
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
    return nn.Sequential(*layers)


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
            blocks.append(_conv_block(c_in, c, pool=i < CNN_POOLED_BLOCKS))
            c_in = c
        head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, num_classes))
        super().__init__([*blocks, head], widths)


class TransformerBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.attn, self.mlp = CausalSelfAttention(d), MLP(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.mlp(x)


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
            groups.append(nn.Sequential(*layers))
        super().__init__([*groups, LMHead(d_model, vocab_size)], [d_model] * n_slots)
        self.block_size = block_size
