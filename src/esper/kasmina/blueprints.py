"""Blueprints: the kinds of seed module a slot can grow, per host topology.

A seed computes a residual delta f(h) with the shape of its input; the slot adds it to the host
stream as h + alpha * f(h). Every seed's last layer starts at zero (zero-initialised BatchNorm
or LayerNorm gain, or output projection), so a new seed is an exact identity: it enters the
stream only as far as training moves it, instead of adding an O(1) random delta when it is
blended. Each blueprint states its exact parameter count as a formula of the
slot width, so a controller can reason about cost before building anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import torch
import torch.nn.functional as F
from torch import nn

from esper.kasmina.width import ParamMerge, Widening, WidthSite, concatenated, fresh_like, weight_only


class Topology(StrEnum):
    CNN = "cnn"  # activations (B, C, H, W)
    TRANSFORMER = "transformer"  # activations (B, T, D)


@dataclass(frozen=True)
class Blueprint:
    name: str
    topology: Topology
    build: Callable[[int], nn.Module]
    param_count: Callable[[int], int]
    description: str


# --------------------------------------------------------------------------- CNN seeds
def _reduced(c: int) -> int:
    """Hidden width of squeeze and bottleneck seeds."""
    return max(c // 4, 4)


class NormSeed2d(nn.Module):
    """Batch-normalised copy of the stream, scaled by a gain that starts at zero."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.norm = zero_last(nn.BatchNorm2d(c))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(h)


class SqueezeExciteSeed(nn.Module):
    """Channel attention: rescales each channel of the stream by a learned gate in (-1, 1)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        r = _reduced(c)
        self.fc1, self.fc2 = nn.Linear(c, r), nn.Linear(r, c)
        zero_last(self.fc2)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        gate = torch.tanh(self.fc2(F.relu(self.fc1(h.mean(dim=(2, 3))))))
        return h * gate[:, :, None, None]


def zero_last(module: nn.Module) -> nn.Module:
    """Zero the weight (and bias) of a seed's output layer, so the seed starts as an identity."""
    nn.init.zeros_(module.weight)
    if getattr(module, "bias", None) is not None:
        nn.init.zeros_(module.bias)
    return module


def _conv_bn(c_in: int, c_out: int, k: int, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, k, padding=k // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]


def _zero_gain(layers: list[nn.Module]) -> list[nn.Module]:
    """conv + BN with the BN gain at zero: the block outputs exactly zero until it learns."""
    zero_last(layers[-1])
    return layers


def _depthwise(c: int) -> nn.Module:
    return nn.Sequential(*_conv_bn(c, c, 3, groups=c), nn.ReLU(), *_zero_gain(_conv_bn(c, c, 1)))


def _conv_light(c: int) -> nn.Module:
    return nn.Sequential(*_zero_gain(_conv_bn(c, c, 3)))


def _conv_heavy(c: int) -> nn.Module:
    return nn.Sequential(*_conv_bn(c, c, 3), nn.ReLU(), *_zero_gain(_conv_bn(c, c, 3)))


def _bottleneck(c: int) -> nn.Module:
    b = _reduced(c)
    return nn.Sequential(*_conv_bn(c, b, 1), nn.ReLU(), *_conv_bn(b, b, 3), nn.ReLU(), *_zero_gain(_conv_bn(b, c, 1)))


# --------------------------------------------------------------------------- transformer seeds
class NormSeed(nn.Module):
    """Layer-normalised copy of the stream, scaled by a gain that starts at zero."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = zero_last(nn.LayerNorm(d))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(h)


LORA_RANK = 8


class LoRASeed(nn.Module):
    """Low-rank linear map of the stream; `up` starts at zero as in LoRA."""

    def __init__(self, d: int, rank: int = LORA_RANK) -> None:
        super().__init__()
        self.down, self.up = nn.Linear(d, rank, bias=False), zero_last(nn.Linear(rank, d, bias=False))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.up(self.down(h))


def attention_heads(d: int) -> int:
    """Heads of 32 channels each, at least one."""
    return max(1, d // 32) if d % max(1, d // 32) == 0 else 1


class CausalSelfAttention(nn.Module):
    """Pre-norm causal multi-head self-attention; used by the transformer host and as a seed."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.n_head = attention_heads(d)
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        q, k, v = self.qkv(self.norm(h)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    """Pre-norm feed-forward block with a 4x hidden width. Its `fc` feeding `proj` is the layer
    pair a width seed widens (`esper.kasmina.width`), reading the normalised input."""

    def __init__(self, d: int, hidden: int | None = None) -> None:
        super().__init__()
        hidden = 4 * d if hidden is None else hidden
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, hidden)
        self.proj = nn.Linear(hidden, d)

    def forward(self, h: torch.Tensor, widening: Widening | None = None) -> torch.Tensor:
        u = self.norm(h)
        a = F.gelu(self.fc(u))
        y = self.proj(a)
        return y if widening is None else widening(u, a, y)

    @property
    def width_site(self) -> WidthSite:
        return WidthSite(self.fc.in_features, self.fc.out_features, self.proj.out_features)

    def merge(self, seed: nn.Module, alpha: float) -> list[ParamMerge]:
        """Concatenate an `MLPWidthSeed`'s units into `fc` and `proj` (its `proj` columns scaled by
        `alpha`; `proj`'s bias stays the host's)."""
        fc, proj = self._wider(self.width_site.hidden + seed.fc.out_features)
        merges = concatenated(self.fc, fc, seed.fc, dim=0)
        merges += concatenated(weight_only(self.proj), proj, seed.proj, dim=1, scale=alpha)
        proj.bias = self.proj.bias
        self.fc, self.proj = fc, proj
        return merges

    def get_extra_state(self) -> dict[str, int]:
        return {"hidden": self.width_site.hidden}

    def set_extra_state(self, state: dict[str, int]) -> None:
        """A merged (wider) MLP is rebuilt at its width before its tensors are loaded."""
        if state["hidden"] != self.width_site.hidden:
            self.fc, self.proj = self._wider(state["hidden"])

    def _wider(self, hidden: int) -> tuple[nn.Module, nn.Module]:
        site, ref = self.width_site, self.fc
        return (
            fresh_like(ref, lambda: nn.Linear(site.in_dim, hidden)),
            fresh_like(ref, lambda: nn.Linear(hidden, site.out_dim)),
        )


def _zero_output(block: CausalSelfAttention | MLP) -> nn.Module:
    """The host's own block, as a seed that starts as an identity."""
    zero_last(block.proj)
    return block


# --------------------------------------------------------------------------- width seeds
class ConvWidthSeed(nn.Module):
    """`units` more channels of a whole CNN block (`ConvBlock`) and of the stream it writes:

    - `conv_in` (random) and `norm_in`: new hidden channels, read from the block's input;
    - `conv_out` (zero): the new hidden channels into the block's own output channels;
    - `conv_new` (random) and `norm_new`: new output channels, read from every hidden channel;
    - `next_in` (zero): the new output channels into the next segment's first layer.

    Merged, these are exactly the tensors a block `units` channels wider has, so a host whose
    every block grew by a quarter is a static host a quarter wider."""

    def __init__(self, site: WidthSite, units: int) -> None:
        super().__init__()
        if site.next_dim < 1:
            raise ValueError("a CNN width seed needs the width of the layer after its block (WidthSite.next_dim)")
        self.in_dim, self.units, self.next_is_conv = site.in_dim, units, site.next_is_conv
        self.conv_in = nn.Conv2d(site.in_dim, units, 3, padding=1, bias=False)
        self.norm_in = nn.BatchNorm2d(units)
        self.conv_out = zero_last(nn.Conv2d(units, site.out_dim, 3, padding=1, bias=False))
        self.conv_new = nn.Conv2d(site.hidden + units, units, 3, padding=1, bias=False)
        self.norm_new = nn.BatchNorm2d(units)
        self.pool = nn.MaxPool2d(2) if site.pooled else nn.Identity()
        self.next_in = zero_last(
            nn.Conv2d(units, site.next_dim, 3, padding=1, bias=False)
            if site.next_is_conv
            else nn.Linear(units, site.next_dim, bias=False)
        )

    def forward(self, u: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The new hidden and (pooled) output channels, from the block's input `u` (of which the
        seed reads the channels it was built on) and the host's hidden activations `a`."""
        hidden = F.relu(self.norm_in(self.conv_in(u[:, : self.in_dim])))
        out = F.relu(self.norm_new(self.conv_new(torch.cat([a, hidden], 1))))
        return hidden, self.pool(out)

    def to_pair(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.conv_out(hidden)

    def to_next(self, out: torch.Tensor) -> torch.Tensor:
        return self.next_in(out if self.next_is_conv else out.mean(dim=(2, 3)))


class MLPWidthSeed(nn.Module):
    """`units` more hidden units of a transformer MLP (`fc` rows with their bias, GELU, `proj`
    columns that start at zero), reading the MLP's normalised input. The MLP's output is the
    residual stream, which keeps its width."""

    def __init__(self, site: WidthSite, units: int) -> None:
        super().__init__()
        self.fc = nn.Linear(site.in_dim, units)
        self.proj = zero_last(nn.Linear(units, site.out_dim, bias=False))

    def forward(self, u: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, None]:
        return F.gelu(self.fc(u)), None

    def to_pair(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden)


@dataclass(frozen=True)
class WidthBlueprint:
    """A width seed adding `fraction` of a layer pair's hidden units (`esper.kasmina.width`)."""

    name: str
    topology: Topology
    fraction: float
    description: str

    def units(self, site: WidthSite) -> int:
        """round(fraction x hidden units); a `ValueError` when the layer would get no unit."""
        units = round(self.fraction * site.hidden)
        if units < 1:
            raise ValueError(
                f"{self.name} adds {self.fraction:.0%} of a layer's {site.hidden} hidden units: "
                "less than one unit; choose a larger width blueprint or a wider host"
            )
        return units

    def build(self, site: WidthSite) -> nn.Module:
        seed = ConvWidthSeed if self.topology is Topology.CNN else MLPWidthSeed
        module = seed(site, self.units(site))
        module.site = site  # what it was built at: a state dict rebuilds it there (`SeedSlot`)
        return module

    def param_count(self, site: WidthSite) -> int:
        """CNN (`ConvWidthSeed`): 9k(c_in + c_out + hidden + k) + 4k + the next layer's columns,
        9k n (a 3x3 convolution) or k n (the classifier), for n its outputs. Transformer:
        k(d_in + 1) + k d_out (`fc` rows with bias, `proj` columns)."""
        k = self.units(site)
        if self.topology is Topology.CNN:
            next_columns = (9 if site.next_is_conv else 1) * k * site.next_dim
            return 9 * k * (site.in_dim + site.out_dim + site.hidden + k) + 4 * k + next_columns
        return k * (site.in_dim + 1) + k * site.out_dim


# --------------------------------------------------------------------------- registry
_ALL: tuple[Blueprint, ...] = (
    Blueprint("norm", Topology.CNN, NormSeed2d, lambda c: 2 * c, "batch norm with zero-initialised gain"),
    Blueprint(
        "attention",
        Topology.CNN,
        SqueezeExciteSeed,
        lambda c: 2 * c * _reduced(c) + _reduced(c) + c,
        "squeeze-excite channel attention",
    ),
    Blueprint(
        "depthwise", Topology.CNN, _depthwise, lambda c: 9 * c + c * c + 4 * c, "depthwise 3x3 then pointwise 1x1"
    ),
    Blueprint(
        "conv_light", Topology.CNN, _conv_light, lambda c: 9 * c * c + 2 * c, "one 3x3 convolution, batch-normalised"
    ),
    Blueprint("conv_heavy", Topology.CNN, _conv_heavy, lambda c: 18 * c * c + 4 * c, "two 3x3 convolutions"),
    Blueprint(
        "bottleneck",
        Topology.CNN,
        _bottleneck,
        lambda c: 2 * c * _reduced(c) + 9 * _reduced(c) ** 2 + 4 * _reduced(c) + 2 * c,
        "1x1 down, 3x3, 1x1 up",
    ),
    Blueprint("norm", Topology.TRANSFORMER, NormSeed, lambda d: 2 * d, "layer norm with zero-initialised gain"),
    Blueprint("lora", Topology.TRANSFORMER, LoRASeed, lambda d: 2 * d * LORA_RANK, f"rank-{LORA_RANK} linear map"),
    Blueprint(
        "attention",
        Topology.TRANSFORMER,
        lambda d: _zero_output(CausalSelfAttention(d)),
        lambda d: 2 * d + 4 * d * d + 4 * d,
        "causal self-attention",
    ),
    Blueprint(
        "mlp",
        Topology.TRANSFORMER,
        lambda d: _zero_output(MLP(d)),
        lambda d: 2 * d + 8 * d * d + 5 * d,
        "feed-forward block, 4x hidden",
    ),
)

BLUEPRINTS: dict[Topology, dict[str, Blueprint]] = {
    topo: {bp.name: bp for bp in _ALL if bp.topology is topo} for topo in Topology
}
"""Residual blueprints by topology, in a fixed order (the order a controller rotates through
them, and the learned policy's blueprint head)."""

WIDTH_FRACTIONS: dict[str, float] = {"widen_25": 0.25, "widen_50": 0.5, "widen_100": 1.0}

WIDENS = {Topology.CNN: "channels of the block (hidden and output)", Topology.TRANSFORMER: "MLP hidden units"}

WIDTH_BLUEPRINTS: dict[Topology, dict[str, WidthBlueprint]] = {
    topo: {
        name: WidthBlueprint(name, topo, fraction, f"+{fraction:.0%} {WIDENS[topo]} before the slot")
        for name, fraction in WIDTH_FRACTIONS.items()
    }
    for topo in Topology
}
"""Width blueprints by topology. They are chosen by name (`--blueprints widen_50`), for every
controller; a learned policy's blueprint head holds those its run allowed."""

AnyBlueprint = Blueprint | WidthBlueprint


def blueprint_names(topology: Topology) -> tuple[str, ...]:
    """The residual blueprints of `topology`: the default choice of every controller."""
    return tuple(BLUEPRINTS[topology])


def get_blueprint(topology: Topology, name: str) -> AnyBlueprint:
    """The blueprint `name` for `topology`, residual or width; a `ValueError` naming the valid
    choices otherwise."""
    table: dict[str, AnyBlueprint] = {**BLUEPRINTS[topology], **WIDTH_BLUEPRINTS[topology]}
    if name not in table:
        other = [t.value for t in Topology if t is not topology and name in BLUEPRINTS[t]]
        hint = f" ({name!r} is a {other[0]} blueprint)" if other else ""
        raise ValueError(
            f"unknown blueprint {name!r} for a {topology.value} host{hint}; choose from: {' '.join(table)}"
        )
    return table[name]
