"""Rewards for a learned controller, computed from (state, next state): what an action did is in
the state it leads to.

The objective. A controller is judged by the network an episode ends with:

    J = final selection accuracy (points) - param_price x (seed parameters / host parameters)
        - compute_price x (extra training FLOPs / the start host's whole run)

the accuracy on the selection split (the only split a decision reads), minus a stated price for
the parameters the seeds added: `param_price` points of accuracy for every host-size of added
parameters (a seed half the size of the host must buy `param_price / 2` points to be worth
keeping). Seeds still alive at the end count as kept; culled ones cost nothing. The compute
price (`compute_price`, 0 by default) charges the training FLOPs the episode spent beyond what
its start host alone would have spent (`TrainingSignals.extra_compute_share`), culled seeds'
included: the parameter price cannot see a seed grown, trained and culled, nor when a kept one
was grown, and growth is judged against a static host on training compute as well as on size.

Two modes behind one interface (`RewardFunction`), configured by `RewardConfig`:

- `dense` (default), one term of each kind per step:
  - accuracy: `accuracy_weight` x the change in selection accuracy (points);
  - parameter cost: `-accuracy_weight x param_price` x the change in seed parameters / host
    parameters. A germination pays its price when the seed appears and a cull refunds it, so a
    seed is paid for exactly once, and only for as long as it stays.
  - compute cost: `-accuracy_weight x compute_price` x the change in the extra compute share:
    each epoch pays for the FLOPs its seeds and widened layers cost, and nothing is refunded.
  All three are differences of J, so over an episode they telescope to
  `accuracy_weight x (J_end - J_start)`: the undiscounted return ranks episodes exactly as the
  objective does, a seed that changes no accuracy never earns a positive return, and nothing is
  paid twice (there is no separate bonus for fossilizing or penalty for culling: the accuracy
  term already holds what a seed really did).
  - shaping: potential-based (Ng et al. 1999), `gamma * phi(next) - phi(state)` with one potential
    over all slots, the sum of each seed's stage potential; terminal states have potential 0.
    Culling a seed drops its slot's potential to zero, giving back what its stages earned. It
    re-times reward toward the decisions that earn it without changing which policy is optimal;
    its discounted sum over an episode is 0, and its undiscounted sum is <= 0. Its gamma must
    equal the PPO gamma, or the guarantee is void.
- `sparse`: nothing until the last step, then `accuracy_weight x J_end`. It differs from the
  objective gain by `accuracy_weight x J_start`, which the episode's seed alone fixes (every
  controller starts from the same host), so it ranks the episodes of a seed as the objective
  does; unlike `dense`, its return is positive whatever the seeds did.

In both modes a governor panic ends the episode with `-panic_penalty`.

A paired static baseline (`static_baseline`, off by default): each step also pays
`-accuracy_weight x` the change in selection accuracy of a *static twin*, the same host on the
same RNG seed and the same batches with no growth. The twin's curve does not depend on any
action, so subtracting it is a control variate: it changes neither which policy is optimal nor
the expected policy gradient, and it takes out of the return what the seed's host initialisation
and data order alone would have earned. With it a dense return telescopes to
`accuracy_weight x (J_end - S_end)`, the episode's gain over the static host on its own seed
(`S` is the twin's selection accuracy; both start equal), the paired difference `eval` reports.
Why: a host's accuracy swings by points from seed to seed and epoch to epoch, while a good
decision moves it by tenths, so without the pairing that noise dominates every advantage.

The trainer uses gamma = 1: an episode is one finite host training run with time in the
observation, so nothing needs discounting, and the undiscounted return is the objective itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from esper.leyline import SeedStage, TrainingSignals

REWARD_MODES: tuple[str, ...] = ("dense", "sparse")

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
    """The reward: mode, the objective's weight and parameter price, shaping, panic penalty."""

    mode: str = "dense"
    gamma: float = 1.0
    """Discount of the shaping term; must equal the PPO gamma."""
    accuracy_weight: float = 0.1
    """Reward per point of the objective (selection accuracy, minus the parameter and compute prices)."""
    param_price: float = 1.0
    """Points of selection accuracy that added parameters as many as the host's own must buy."""
    compute_price: float = 0.0
    """Points of selection accuracy that extra training FLOPs as many as the start host's whole
    run must buy."""
    shaping_weight: float = 0.1
    """Scale of the stage potential."""
    panic_penalty: float = 5.0
    static_baseline: bool = False
    """Subtract a static twin's accuracy change from every step's reward (a control variate): the
    trainer then runs each round's envs on one RNG seed beside one static twin."""

    def __post_init__(self) -> None:
        if self.mode not in REWARD_MODES:
            raise ValueError(f"unknown reward mode {self.mode!r}; choose from: {' '.join(REWARD_MODES)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"reward gamma must be in [0, 1], got {self.gamma}")
        if self.param_price < 0:
            raise ValueError(f"param_price must be >= 0, got {self.param_price}")
        if self.compute_price < 0:
            raise ValueError(f"compute_price must be >= 0, got {self.compute_price}")


@dataclass(frozen=True)
class RewardBreakdown:
    accuracy: float = 0.0
    parameter_cost: float = 0.0
    compute_cost: float = 0.0
    shaping: float = 0.0
    panic: float = 0.0
    terminal: float = 0.0
    """The sparse mode's end-of-episode reward."""
    static_baseline: float = 0.0
    """Minus the static twin's accuracy change, when the config asks for it."""

    @property
    def total(self) -> float:
        parts = (self.accuracy, self.parameter_cost, self.compute_cost, self.shaping, self.panic, self.terminal)
        return sum(parts) + self.static_baseline

    def to_json(self) -> dict[str, float]:
        return asdict(self)


def potential(signals: TrainingSignals) -> float:
    """One potential over the whole slot set: the sum of every seed's stage potential."""
    return sum(STAGE_POTENTIAL.get(s.stage, 0.0) for s in signals.slots if s.seed_id is not None)


def objective(signals: TrainingSignals, param_price: float, compute_price: float = 0.0) -> float:
    """J: selection accuracy (points) minus the price of the parameters the seeds add and of the
    extra training compute spent so far."""
    return signals.val_accuracy - param_price * signals.seed_param_share - compute_price * signals.extra_compute_share


class RewardFunction:
    """`reward(state, next_state, terminal, panic)`: one step's reward and its parts. The action
    taken between the two states needs no term of its own: what it did is in the next state."""

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
        next_state: TrainingSignals,
        terminal: bool,
        panic: bool = False,
        static_gain: float | None = None,
    ) -> RewardBreakdown:
        """`static_gain`: the static twin's change in selection accuracy over the same epoch,
        required exactly when the config has `static_baseline`."""
        c = self.config
        if c.static_baseline != (static_gain is not None):
            raise ValueError("static_gain must be given exactly when the reward has static_baseline")
        penalty = -c.panic_penalty if panic else 0.0
        baseline = -c.accuracy_weight * static_gain if static_gain is not None else 0.0
        if c.mode == "sparse":
            end = c.accuracy_weight * objective(next_state, c.param_price, c.compute_price) if terminal else 0.0
            return RewardBreakdown(terminal=end, panic=penalty, static_baseline=baseline)
        next_potential = 0.0 if terminal else potential(next_state)
        return RewardBreakdown(
            accuracy=c.accuracy_weight * (next_state.val_accuracy - state.val_accuracy),
            parameter_cost=-c.accuracy_weight * c.param_price * (next_state.seed_param_share - state.seed_param_share),
            compute_cost=-c.accuracy_weight
            * c.compute_price
            * (next_state.extra_compute_share - state.extra_compute_share),
            shaping=c.shaping_weight * (c.gamma * next_potential - potential(state)),
            panic=penalty,
            static_baseline=baseline,
        )
