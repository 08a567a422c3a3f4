"""The simplest controllers a learned one is compared with: never grow, and act at random.

Both speak the `Controller` protocol of `esper.tolaria` (reset, decide, record_step), so they run
through the same episode loop as the heuristic and a learned policy.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from esper.kasmina import StageChange
from esper.kasmina.blueprints import Topology
from esper.leyline import Decision, GateThresholds, LifecycleOp, TrainingSignals
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
