"""SeedSlot: one insertion point in a host, holding at most one seed and its lifecycle."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from esper.kasmina.blueprints import Topology, get_blueprint
from esper.kasmina.isolation import straight_through
from esper.kasmina.lifecycle import GateInputs, SlotLifecycle, StageChange
from esper.leyline import BlendSchedule, GateThresholds, SeedStage, SlotId


class SeedSlot(nn.Module):
    """Applies its seed to the host stream according to the lifecycle stage.

    The slot's identity, blueprint and lifecycle travel in the model's `state_dict` as this
    module's extra state, and loading a state dict rebuilds the seed module before its weights
    are loaded. A snapshot or checkpoint of the model is therefore complete on its own.
    """

    def __init__(self, slot_id: SlotId, dim: int, topology: Topology, thresholds: GateThresholds) -> None:
        super().__init__()
        self.slot_id, self.dim, self.topology = slot_id, dim, topology
        self.lifecycle = SlotLifecycle(thresholds)
        self.seed: nn.Module | None = None
        self.blueprint: str | None = None
        self.seed_id: str | None = None
        # Moves with the model (.to, .cuda, .half), so a new seed is built where the host lives.
        self.register_buffer("_anchor", torch.empty(0), persistent=False)

    # ----------------------------------------------------------------- forward
    def forward(self, h: torch.Tensor, alpha_override: float | None = None) -> torch.Tensor:
        """Host stream through this slot. `alpha_override` replaces the lifecycle's alpha; it is
        how the counterfactual (alpha 0) is asked for, without touching any module state."""
        seed = self.seed
        if seed is None:
            return h
        stage = self.lifecycle.stage
        if alpha_override is None:
            if stage is SeedStage.TRAINING:
                if not torch.is_grad_enabled():
                    return h  # the output is the host's either way; without gradients the seed has nothing to do
                # Isolation: the seed sees a detached stream, so its gradient never reaches the
                # host, and the output is the host's exactly.
                return straight_through(h, seed(h.detach()))
            alpha = self.lifecycle.alpha
        else:
            alpha = alpha_override
        if alpha == 0.0:
            return h
        return h + alpha * seed(h).to(h.dtype)

    @property
    def alpha(self) -> float:
        return self.lifecycle.alpha

    @property
    def stage(self) -> SeedStage:
        return self.lifecycle.stage

    def param_count(self) -> int:
        return 0 if self.seed is None else sum(p.numel() for p in self.seed.parameters())

    # ----------------------------------------------------------------- lifecycle operations
    def germinate(self, blueprint: str, seed_id: str, schedule: BlendSchedule) -> list[StageChange]:
        """G0 then G1: build the seed on the host's device and dtype, and start its training. The
        module is built before any state changes, and G0 (checked once, by the lifecycle) refuses
        before the slot takes it, so a failure leaves no change."""
        module = get_blueprint(self.topology, blueprint).build(self.dim)
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
        return {"lifecycle": self.lifecycle.state_dict(), "blueprint": self.blueprint, "seed_id": self.seed_id}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Rebuild the seed module described by `state`; its weights are loaded right after."""
        self.lifecycle.load_state_dict(state["lifecycle"])
        self._uninstall()
        if self.lifecycle.has_seed:
            with torch.random.fork_rng(devices=[]):  # the weights are overwritten: leave the global RNG be
                self._install(
                    get_blueprint(self.topology, state["blueprint"]).build(self.dim),
                    state["blueprint"],
                    state["seed_id"],
                )

    # ----------------------------------------------------------------- internals
    def _install(self, module: nn.Module, blueprint: str, seed_id: str) -> None:
        module = module.to(device=self._anchor.device, dtype=self._anchor.dtype)
        self.seed, self.blueprint, self.seed_id = module, blueprint, seed_id

    def _uninstall(self) -> None:
        self.seed, self.blueprint, self.seed_id = None, None, None

    def _drop_if_culled(self, changes: list[StageChange]) -> None:
        if any(c.target is SeedStage.CULLED for c in changes):
            self._uninstall()
