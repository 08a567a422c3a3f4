"""The simplest controllers a learned one is compared with: never grow, grow once on a fixed
schedule (naive growth), and act at random.

Both speak the `Controller` protocol of `esper.tolaria` (reset, decide, record_step), so they run
through the same episode loop as the heuristic and a learned policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from esper.kasmina import StageChange
from esper.kasmina.blueprints import Topology, get_blueprint
from esper.kasmina.lifecycle import fossilize_gate
from esper.leyline import Decision, GateThresholds, LifecycleOp, SeedStage, TrainingSignals
from esper.tamiyo.actions import ActionSpace
from esper.tamiyo.distributions import sample_factored


class StaticController:
    """Waits every epoch: the host trains as it was built."""

    def reset(self) -> None:
        """Nothing to forget."""

    def decide(self, signals: TrainingSignals) -> Decision:
        return Decision(LifecycleOp.WAIT)

    def record_step(self, decision: Decision, changes: Sequence[tuple[str, StageChange]]) -> None:
        """A static host learns nothing from its steps."""


class NaiveGrowthController:
    """Naive growth, the growth literature's simplest baseline: a fixed schedule of width or
    residual seeds, one per slot (`schedule`: slot -> (blueprint, first epoch)), germinated in
    host order one slot per step once its epoch is reached, and every seed the gates let through
    kept (fossilized as soon as G4 passes); no decision reads anything else.

    The classic form is one blueprint in every slot from one epoch. A schedule per slot lets a
    run place its growth where it is cheap: a width seed costs the FLOPs of its block's
    resolution for the epochs it trains (`experiments/growth-frontier/flops_per_param.py`).

    The gates still cull a seed that does not help on probation, as they do for every controller.
    Under a compute budget a seed that is due waits until it fits.
    """

    def __init__(
        self,
        topology: Topology,
        schedule: Mapping[str, tuple[str, int]],
        thresholds: GateThresholds | None = None,
    ) -> None:
        if not schedule:
            raise ValueError("naive growth needs at least one slot to grow in")
        for blueprint, epoch in schedule.values():
            get_blueprint(topology, blueprint)
            if epoch < 0:
                raise ValueError(f"naive growth starts at an epoch >= 0, got {epoch}")
        self.schedule = dict(schedule)
        self.slot_names = tuple(schedule)
        self.thresholds = thresholds or GateThresholds()
        self.reset()

    def reset(self) -> None:
        self.grown: set[str] = set()

    def decide(self, signals: TrainingSignals) -> Decision:
        by_name = {s.name: s for s in signals.slots}
        for name in self.slot_names:
            s = by_name[name]
            if fossilize_gate(s.stage, s.epochs_in_stage, s.contribution, self.thresholds).passed:
                return Decision(LifecycleOp.FOSSILIZE, name, reason="naive: keep what the gates pass")
        if signals.seeds_germinated < signals.max_germinations:
            for name, (blueprint, epoch) in self.schedule.items():
                due = signals.epoch >= epoch and name not in self.grown
                if due and by_name[name].stage is SeedStage.DORMANT and by_name[name].affords(blueprint):
                    return Decision(LifecycleOp.GERMINATE, name, blueprint, reason=f"naive: grow at epoch {epoch}")
        return Decision(LifecycleOp.WAIT)

    def record_step(self, decision: Decision, changes: Sequence[tuple[str, StageChange]]) -> None:
        self.grown |= {slot for slot, change in changes if change.target is SeedStage.GERMINATED}


class RandomController:
    """Uniform among the actions the masks allow, head by head: the op uniformly among the valid
    ops, then the slot uniformly among the slots where that op can act, then the blueprint and
    the blend schedule uniformly. So every decision is executable, as a policy's is.

    Why head by head (not uniform over whole actions): it is what an untrained policy with equal
    logits does, so it is the floor a learned policy starts from.
    """

    def __init__(
        self,
        topology: Topology,
        slot_names: Sequence[str],
        blueprints: Sequence[str] | None = None,
        thresholds: GateThresholds | None = None,
        rng_seed: int = 0,
    ) -> None:
        """`thresholds` must be the env's (they decide which ops are valid)."""
        self.actions = ActionSpace(topology, tuple(slot_names), blueprints)
        self.thresholds = thresholds or GateThresholds()
        self.rng_seed = rng_seed
        self.generator = torch.Generator().manual_seed(rng_seed)

    def reset(self) -> None:
        """Each episode draws from the same stream start, so an episode depends on its seed only."""
        self.generator.manual_seed(self.rng_seed)

    def decide(self, signals: TrainingSignals) -> Decision:
        masks = self.actions.masks(signals, self.thresholds)
        logits = [torch.zeros(1, n) for n in self.actions.head_sizes]
        sample = sample_factored(logits, masks, generator=self.generator)
        return self.actions.decode(*sample.actions[0].tolist())

    def record_step(self, decision: Decision, changes: Sequence[tuple[str, StageChange]]) -> None:
        """Random choices learn nothing."""
