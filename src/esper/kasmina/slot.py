"""SeedSlot: one insertion point in a host, holding at most one seed and its lifecycle."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from esper.kasmina.blueprints import Topology, WidthBlueprint, get_blueprint
from esper.kasmina.isolation import straight_through
from esper.kasmina.lifecycle import GateInputs, SlotLifecycle, StageChange
from esper.kasmina.width import Widening, WidthSite
from esper.leyline import BlendSchedule, GateThresholds, SeedStage, SlotId


class SeedSlot(nn.Module):
    """Applies its seed to the host stream according to the lifecycle stage.

    A residual seed joins the stream at the slot, as h + alpha * seed(h). A width seed joins the
    layer pair of the segment before the slot (`width_site`), through `widening`; the stream
    passes the slot unchanged. A fossilized width seed is merged into the host
    (`MorphogeneticModel.merge_width_seed`): the slot then holds no module, and its parameter
    count stays the seed's (`merged_params`), so growth is priced the same before and after.

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
        width_site: WidthSite | None = None,
    ) -> None:
        super().__init__()
        self.slot_id, self.dim, self.topology, self.width_site = slot_id, dim, topology, width_site
        self.lifecycle = SlotLifecycle(thresholds)
        self.seed: nn.Module | None = None
        self.blueprint: str | None = None
        self.seed_id: str | None = None
        self.merged_params = 0
        """Parameters of a width seed merged into the host (0 until one is)."""
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
        return self._join(h, h, alpha_override, seed)

    def widening(
        self, alpha_override: float | None = None, seed_stats: Mapping[str, torch.Tensor] | None = None
    ) -> Widening | None:
        """How this slot's width seed joins the layer pair before the slot, or None when it holds
        none. `seed_stats` replaces the running statistics of the seed's BatchNorm (local names),
        as `MorphogeneticModel`'s `batchnorm_stats` does for every other part."""
        seed = self.seed
        if seed is None or not self.holds_width_seed:
            return None
        run: Callable[[torch.Tensor], torch.Tensor] = (
            seed if not seed_stats else lambda u: functional_call(seed, dict(seed_stats), (u,))
        )
        return lambda u, y: self._join(u, y, alpha_override, run)

    def _join(
        self,
        u: torch.Tensor,
        y: torch.Tensor,
        alpha_override: float | None,
        seed: Callable[[torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """`y` with `seed(u)` joined at the stage's alpha (`u` is `y` itself for a residual seed)."""
        if alpha_override is None:
            if self.lifecycle.stage is SeedStage.TRAINING:
                if not torch.is_grad_enabled():
                    return y  # the output is the host's either way; without gradients the seed has nothing to do
                # Isolation: the seed sees a detached input, so its gradient never reaches the
                # host, and the output is the host's exactly.
                return straight_through(y, seed(u.detach()))
            alpha = self.lifecycle.alpha
        else:
            alpha = alpha_override
        if alpha == 0.0:
            return y
        return y + alpha * seed(u).to(y.dtype)

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

    def build_seed(self, blueprint: str) -> nn.Module:
        """A new seed module of `blueprint` for this slot; a `ValueError` when the slot cannot take it."""
        bp = get_blueprint(self.topology, blueprint)
        return bp.build(self._width_site_for(bp)) if isinstance(bp, WidthBlueprint) else bp.build(self.dim)

    def seed_param_count(self, blueprint: str) -> int:
        """Parameters a seed of `blueprint` would have here, without building it (no RNG drawn);
        a `ValueError` when the slot cannot take it."""
        bp = get_blueprint(self.topology, blueprint)
        if isinstance(bp, WidthBlueprint):
            return bp.param_count(self._width_site_for(bp))
        return bp.param_count(self.dim)

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

    def absorb_merged(self) -> None:
        """The width seed has been merged into the host: keep its count, drop its module."""
        self.merged_params = self.param_count()
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
            with torch.random.fork_rng(devices=[]):  # the weights are overwritten: leave the global RNG be
                self._install(self.build_seed(state["blueprint"]), state["blueprint"], state["seed_id"])

    # ----------------------------------------------------------------- internals
    def _install(self, module: nn.Module, blueprint: str, seed_id: str) -> None:
        module = module.to(device=self._anchor.device, dtype=self._anchor.dtype)
        self.seed, self.blueprint, self.seed_id = module, blueprint, seed_id
        self._width_blueprint = isinstance(get_blueprint(self.topology, blueprint), WidthBlueprint)

    def _uninstall(self) -> None:
        self.seed, self.blueprint, self.seed_id, self.merged_params = None, None, None, 0

    def _drop_if_culled(self, changes: list[StageChange]) -> None:
        if any(c.target is SeedStage.CULLED for c in changes):
            self._uninstall()
