"""Rewards for a learned controller, computed from (state, action, next state).

Two modes behind one interface (`RewardFunction`), configured by `RewardConfig`:

- `contribution` (default), dense, one term per step:
  - accuracy: `accuracy_weight` x the change in validation accuracy (points). Summed over an
    episode it telescopes to final minus initial accuracy, the quantity a grower cares about.
  - attribution, for the slot the action touched only (WAIT touches none): fossilizing a seed
    earns `attribution_weight` x its counterfactual contribution (the one the gate read, so it is
    positive); culling a seed costs `attribution_weight` x its positive contribution (throwing
    away a helping seed). Culling a harmful seed earns nothing here: the accuracy term already
    pays for the recovery, and paying twice would make germinate-then-cull a profit.
  - rent: `rent_weight` x the seeds' parameters as a fraction of the host's, every step.
  - shaping: potential-based (Ng et al. 1999), `gamma * phi(next) - phi(state)` with one
    potential over all slots, the sum of each seed's stage potential. Culling a seed drops its
    slot's potential to zero, giving back what its stages earned; terminal states have
    potential 0. So no germinate/cull cycle earns shaping reward, and the shaping cannot change
    which policy is optimal. Its gamma must equal the PPO gamma, or the guarantee is void.
- `sparse`: nothing until the last step, then `accuracy_weight` x the final validation accuracy
  minus the rent of the parameters kept, for the whole episode.

In both modes a governor panic ends the episode with `-panic_penalty`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from esper.leyline import Decision, LifecycleOp, SeedStage
from esper.tamiyo.signals import TrainingSignals

REWARD_MODES: tuple[str, ...] = ("contribution", "sparse")

STAGE_POTENTIAL: dict[SeedStage, float] = {
    SeedStage.GERMINATED: 1.0,
    SeedStage.TRAINING: 2.0,
    SeedStage.BLENDING: 3.0,
    SeedStage.PROBATIONARY: 4.0,
    SeedStage.FOSSILIZED: 5.0,
}
"""A seed's potential grows with each stage it survives; an empty slot (any other stage) has 0."""


@dataclass(frozen=True)
class RewardConfig:
    mode: str = "contribution"
    gamma: float = 0.99
    """Discount of the shaping term; must equal the PPO gamma."""
    accuracy_weight: float = 0.1
    """Reward per point of validation accuracy."""
    attribution_weight: float = 0.1
    """Reward per point of counterfactual contribution, at fossilize (+) and at cull (-)."""
    rent_weight: float = 0.5
    """Cost per step of seed parameters equal to the host's own (a seed of 2% of the host costs 0.01)."""
    shaping_weight: float = 0.1
    """Scale of the stage potential."""
    panic_penalty: float = 5.0

    def __post_init__(self) -> None:
        if self.mode not in REWARD_MODES:
            raise ValueError(f"unknown reward mode {self.mode!r}; choose from: {' '.join(REWARD_MODES)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"reward gamma must be in [0, 1], got {self.gamma}")


@dataclass(frozen=True)
class RewardBreakdown:
    accuracy: float = 0.0
    attribution: float = 0.0
    rent: float = 0.0
    shaping: float = 0.0
    panic: float = 0.0
    terminal: float = 0.0
    """The sparse mode's end-of-episode reward."""

    @property
    def total(self) -> float:
        return self.accuracy + self.attribution + self.rent + self.shaping + self.panic + self.terminal

    def to_json(self) -> dict[str, float]:
        return asdict(self)


def potential(signals: TrainingSignals) -> float:
    """One potential over the whole slot set: the sum of every seed's stage potential."""
    return sum(STAGE_POTENTIAL.get(s.stage, 0.0) for s in signals.slots if s.seed_id is not None)


def seed_param_share(signals: TrainingSignals) -> float:
    """Parameters of the seeds alive now (fossilized included, counted once) over the host's."""
    return signals.seed_params / max(signals.host_params, 1)


class RewardFunction:
    """`reward(state, decision, next_state, terminal, panic)`: one step's reward and its parts."""

    def __init__(self, config: RewardConfig, ppo_gamma: float) -> None:
        if config.gamma != ppo_gamma:
            raise ValueError(
                f"the shaping gamma ({config.gamma}) must equal the PPO gamma ({ppo_gamma}); "
                "otherwise potential-based shaping changes which policy is optimal"
            )
        self.config = config

    def __call__(
        self,
        state: TrainingSignals,
        decision: Decision,
        next_state: TrainingSignals,
        terminal: bool,
        panic: bool = False,
    ) -> RewardBreakdown:
        c = self.config
        penalty = -c.panic_penalty if panic else 0.0
        if c.mode == "sparse":
            if not terminal:
                return RewardBreakdown(panic=penalty)
            end = c.accuracy_weight * next_state.val_accuracy
            end -= c.rent_weight * seed_param_share(next_state) * next_state.max_epochs
            return RewardBreakdown(terminal=end, panic=penalty)
        next_potential = 0.0 if terminal else potential(next_state)
        return RewardBreakdown(
            accuracy=c.accuracy_weight * (next_state.val_accuracy - state.val_accuracy),
            attribution=c.attribution_weight * touched_slot_attribution(state, decision),
            rent=-c.rent_weight * seed_param_share(next_state),
            shaping=c.shaping_weight * (c.gamma * next_potential - potential(state)),
            panic=penalty,
        )


def touched_slot_attribution(state: TrainingSignals, decision: Decision) -> float:
    """The counterfactual credit of the slot `decision` acted on, read from the state it acted on."""
    if decision.op not in (LifecycleOp.FOSSILIZE, LifecycleOp.CULL):
        return 0.0
    assert decision.slot is not None  # Decision guarantees a slot for every op but WAIT
    contribution = state.slot(decision.slot).contribution
    if contribution is None:
        return 0.0
    return contribution if decision.op is LifecycleOp.FOSSILIZE else -max(contribution, 0.0)
