"""SeedSlot: one insertion point in a host, holding at most one seed and its lifecycle."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.func import functional_call

from esper.kasmina.blueprints import BLUEPRINTS, WIDTH_BLUEPRINTS, Topology, WidthBlueprint, get_blueprint
from esper.kasmina.isolation import straight_through
from esper.kasmina.lifecycle import GateInputs, SlotLifecycle, StageChange
from esper.kasmina.width import Inflow, WidthSite, fitted
from esper.leyline import BlendSchedule, GateThresholds, SeedStage, SlotId

if TYPE_CHECKING:
    from esper.kasmina.hosts import Host


ISOLATED = object()
"""The join of a seed training in isolation: the output is the host's, and the seed receives the
gradient of the sum (`straight_through`); the seed reads detached host activations."""


def joined(y: torch.Tensor, contribution: torch.Tensor, weight: float | object) -> torch.Tensor:
    """`y` with a seed's `contribution` joined at `weight` (a blend weight, or `ISOLATED`)."""
    if weight is ISOLATED:
        return straight_through(y, contribution)
    return y + weight * contribution.to(y.dtype)  # type: ignore[operator]


class SeedJoin:
    """A width seed joining its layer pair during one forward pass (the segment calls it as its
    `Widening`); for a seed that widens the pair's output, `inflow` then holds how its new output
    channels join the next segment's first layer. Built per pass, so no module holds pass state."""

    def __init__(self, seed: nn.Module, weight: float | object, run: Callable[..., tuple]) -> None:
        self.seed, self.weight, self.run = seed, weight, run
        self.inflow: Inflow | None = None

    def __call__(self, u: torch.Tensor, a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.weight is ISOLATED:
            u, a = u.detach(), a.detach()
        hidden, out = self.run(u, a)
        if out is not None:
            # zeros for the next layer's outputs that a merge added after the seed was built
            self.inflow = lambda z: joined(z, fitted(self.seed.to_next(out), z.shape, 0), self.weight)
        return joined(y, self.seed.to_pair(hidden), self.weight)


class SeedSlot(nn.Module):
    """Applies its seed to the host stream according to the lifecycle stage.

    A residual seed joins the stream at the slot, as h + alpha * seed(h). A width seed joins the
    layer pair of the segment before the slot (`width_site`), through `widening` (a `SeedJoin`),
    and a CNN one also feeds the next segment's first layer (the join's `inflow`); the stream
    passes the slot unchanged. A fossilized width seed is merged into the host
    (`MorphogeneticModel.merge_width_seed`): the slot then holds no module, and its parameter
    count becomes the parameters the merge added to the host (`merged_params`: the seed's own,
    plus any zeros that fit it to a neighbour merged before it).

    The slot's identity, blueprint and lifecycle travel in the model's `state_dict` as this
    module's extra state, and loading a state dict rebuilds the seed module before its weights
    are loaded. A snapshot or checkpoint of the model is therefore complete on its own.
    """

    def __init__(
        self,
        slot_id: SlotId,
        dim: int,
        topology: Topology,
        thresholds: GateThresholds,
        host: Host | None = None,
    ) -> None:
        super().__init__()
        self.slot_id, self.dim, self.topology = slot_id, dim, topology
        # Read, not owned: the model registers the host. A plain attribute, so `deepcopy` of the
        # model maps it to the copied host; the site is read from it each time, since a
        # neighbour's merge can change the widths around this slot.
        object.__setattr__(self, "_host", host)
        self.thresholds = thresholds
        """The gates' thresholds; a width seed's lifecycle runs under `for_width_seed()` of them."""
        self.lifecycle = SlotLifecycle(thresholds)
        self.seed: nn.Module | None = None
        self.blueprint: str | None = None
        self.seed_id: str | None = None
        self.merged_params = 0
        """Parameters of a width seed merged into the host (0 until one is)."""
        self.seed_site: WidthSite | None = None
        """The site a live width seed was built at (the host's site may widen since, by a
        neighbour's merge): its module is rebuilt at it when a state dict is loaded."""
        self._width_blueprint = False
        # Moves with the model (.to, .cuda, .half), so a new seed is built where the host lives.
        self.register_buffer("_anchor", torch.empty(0), persistent=False)

    # ----------------------------------------------------------------- forward
    def forward(self, h: torch.Tensor, alpha_override: float | None = None) -> torch.Tensor:
        """Host stream through this slot. `alpha_override` replaces the lifecycle's alpha; it is
        how the counterfactual (alpha 0) is asked for, without touching any module state."""
        seed = self.seed
        if seed is None or self.holds_width_seed:
            return h  # a width seed acts inside the segment before the slot (`widening`)
        weight = self._seed_weight(alpha_override)
        if weight == 0.0:
            return h
        return joined(h, seed(h if weight is not ISOLATED else h.detach()), weight)

    def widening(
        self, alpha_override: float | None = None, seed_stats: Mapping[str, torch.Tensor] | None = None
    ) -> SeedJoin | None:
        """How this slot's width seed joins the layer pair before the slot, or None when it holds
        none or takes no part. `seed_stats` replaces the running statistics of the seed's
        BatchNorm (local names), as `MorphogeneticModel`'s `batchnorm_stats` does for every other
        part."""
        seed = self.seed
        if seed is None or not self.holds_width_seed:
            return None
        weight = self._seed_weight(alpha_override)
        if weight == 0.0:
            return None
        stats = dict(seed_stats or {})
        return SeedJoin(seed, weight, seed if not stats else lambda u, a: functional_call(seed, stats, (u, a)))

    def _seed_weight(self, alpha_override: float | None) -> float | object:
        """How the seed's output joins the host's: at `alpha_override`, else at the stage's alpha;
        `ISOLATED` while it trains (a straight-through join); 0 where it takes no part."""
        if alpha_override is not None:
            return alpha_override
        if self.lifecycle.stage is SeedStage.TRAINING:
            # the output is the host's either way; without gradients the seed has nothing to do
            return ISOLATED if torch.is_grad_enabled() else 0.0
        return self.lifecycle.alpha

    @property
    def width_site(self) -> WidthSite | None:
        """The layer pair a width seed in this slot widens, as the host is now (None without one)."""
        host = self._host
        return None if host is None else host.width_site(self.slot_id.index)

    @property
    def holds_width_seed(self) -> bool:
        return self.seed is not None and self._width_blueprint

    @property
    def alpha(self) -> float:
        return self.lifecycle.alpha

    @property
    def stage(self) -> SeedStage:
        return self.lifecycle.stage

    def param_count(self) -> int:
        """The seed's parameters: its module's, or those it merged into the host."""
        return self.merged_params if self.seed is None else sum(p.numel() for p in self.seed.parameters())

    def build_seed(self, blueprint: str, site: WidthSite | None = None) -> nn.Module:
        """A new seed module of `blueprint` for this slot (a width seed at `site`, by default the
        host's site now); a `ValueError` when the slot cannot take it."""
        bp = get_blueprint(self.topology, blueprint)
        if not isinstance(bp, WidthBlueprint):
            return bp.build(self.dim)
        return bp.build(site or self._width_site_for(bp))

    def seed_param_count(self, blueprint: str) -> int:
        """Parameters a seed of `blueprint` would have here, without building it (no RNG drawn);
        a `ValueError` when the slot cannot take it."""
        bp = get_blueprint(self.topology, blueprint)
        if isinstance(bp, WidthBlueprint):
            return bp.param_count(self._width_site_for(bp))
        return bp.param_count(self.dim)

    def accepted_blueprints(self) -> tuple[str, ...]:
        """Every blueprint, residual then width, a seed in this slot could be built from now."""
        names = (*BLUEPRINTS[self.topology], *WIDTH_BLUEPRINTS[self.topology])
        accepted = []
        for name in names:
            try:
                self.seed_param_count(name)
            except ValueError:
                continue
            accepted.append(name)
        return tuple(accepted)

    def _width_site_for(self, bp: WidthBlueprint) -> WidthSite:
        """This slot's layer pair, checked to take `bp`."""
        if self.width_site is None:
            raise ValueError(
                f"slot {self.slot_id.name!r} has no layer pair to widen: {bp.name} needs one; "
                "choose a residual blueprint"
            )
        try:
            bp.units(self.width_site)
        except ValueError as exc:
            raise ValueError(f"slot {self.slot_id.name!r}: {exc}") from None
        return self.width_site

    def absorb_merged(self, added_params: int) -> None:
        """The width seed has been merged into the host, adding `added_params`: keep the count,
        drop the module."""
        self.merged_params = added_params
        self.seed = None

    # ----------------------------------------------------------------- lifecycle operations
    def germinate(self, blueprint: str, seed_id: str, schedule: BlendSchedule) -> list[StageChange]:
        """G0 then G1: build the seed on the host's device and dtype, and start its training. The
        module is built before any state changes, and G0 (checked once, by the lifecycle) refuses
        before the slot takes it, so a failure leaves no change."""
        module = self.build_seed(blueprint)
        changes = [self.lifecycle.germinate(schedule)]
        self._install(module, blueprint, seed_id)
        changes.append(self.lifecycle.start_training(self.seed_is_finite()))
        self._drop_if_culled(changes)
        return changes

    def fossilize(self, contribution: float | None) -> StageChange:
        return self.lifecycle.fossilize(contribution)

    def cull(self, reason: str = "culled by controller") -> StageChange:
        change = self.lifecycle.cull(reason)
        self._drop_if_culled([change])
        return change

    def tick(self, inputs: GateInputs) -> list[StageChange]:
        changes = self.lifecycle.tick(inputs)
        self._drop_if_culled(changes)
        return changes

    def finite_flag(self) -> torch.Tensor:
        """Whether every seed parameter is finite, as a 0-d bool tensor on the seed's device (no sync)."""
        params = [] if self.seed is None else list(self.seed.parameters())
        if not params:
            return torch.ones((), dtype=torch.bool, device=self._anchor.device)
        return torch.stack([torch.isfinite(p).all() for p in params]).all()

    def seed_is_finite(self) -> bool:
        """One host-device sync; called once per germination, not in a hot loop."""
        return bool(self.finite_flag())

    # ----------------------------------------------------------------- persistence
    def get_extra_state(self) -> dict[str, Any]:
        return {
            "lifecycle": self.lifecycle.state_dict(),
            "blueprint": self.blueprint,
            "seed_id": self.seed_id,
            "merged_params": self.merged_params,
            # a neighbour's merge may since have widened the layers the seed reads or feeds
            "seed_site": None if self.seed_site is None else dataclasses.asdict(self.seed_site),
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Rebuild the seed module described by `state` (none for a merged one); its weights are
        loaded right after."""
        self.lifecycle.load_state_dict(state["lifecycle"])
        self._uninstall()
        self.merged_params = int(state["merged_params"])
        if self.lifecycle.has_seed:
            if self.merged_params:
                self.blueprint, self.seed_id = state["blueprint"], state["seed_id"]
                return
            site = WidthSite(**state["seed_site"]) if state.get("seed_site") else None  # missing before format 3
            with torch.random.fork_rng(devices=[]):  # the weights are overwritten: leave the global RNG be
                self._install(self.build_seed(state["blueprint"], site), state["blueprint"], state["seed_id"])

    # ----------------------------------------------------------------- internals
    def _install(self, module: nn.Module, blueprint: str, seed_id: str) -> None:
        # on the host's device and dtype, and in its mode (a seed germinated under eval() is in eval)
        module = module.to(device=self._anchor.device, dtype=self._anchor.dtype).train(self.training)
        self.seed, self.blueprint, self.seed_id = module, blueprint, seed_id
        self._width_blueprint = isinstance(get_blueprint(self.topology, blueprint), WidthBlueprint)
        self.seed_site = getattr(module, "site", None)
        self.lifecycle.thresholds = self.thresholds.for_width_seed() if self._width_blueprint else self.thresholds

    def _uninstall(self) -> None:
        self.seed, self.blueprint, self.seed_id, self.merged_params = None, None, None, 0
        self.seed_site = None
        self.lifecycle.thresholds = self.thresholds

    def _drop_if_culled(self, changes: list[StageChange]) -> None:
        if any(c.target is SeedStage.CULLED for c in changes):
            self._uninstall()
