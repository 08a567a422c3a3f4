"""Rewards: a dense form of the stated objective, potential-based shaping, the sparse mode.

The objective is J = selection accuracy - param_price x seed parameters / host parameters -
compute_price x the extra training compute share at the end of an episode. The properties below
hold for any trajectory, constructed by hypothesis."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import training_signals
from esper.leyline import SeedStage, SlotSignals
from esper.simic import RewardConfig, RewardFunction
from esper.simic.morphogenetic_envs import TrainerConfig
from esper.simic.rewards import STAGE_POTENTIAL, objective, potential

SLOTS = ("early", "mid", "late")
HOST_PARAMS = 1000
REWARD = RewardFunction(RewardConfig(), ppo_gamma=1.0)


def slot(name: str, stage: SeedStage = SeedStage.DORMANT, params: int = 0) -> SlotSignals:
    has_seed = stage in STAGE_POTENTIAL
    return SlotSignals(
        name=name,
        index=SLOTS.index(name),
        enabled=True,
        stage=stage,
        epochs_in_stage=0,
        alpha=0.0,
        blueprint="conv_light" if has_seed else None,
        seed_id=f"seed-{name}" if has_seed else None,
        contribution=None,
        grad_norm=None,
        param_count=params if has_seed else 0,
    )


def signals(stages: dict[str, SeedStage] | None = None, val_accuracy: float = 50.0, params: int = 0, **kw):
    stages = stages or {}
    slots = [slot(n, stages.get(n, SeedStage.DORMANT), params) for n in SLOTS]
    seed_params = sum(s.param_count for s in slots)
    return training_signals(slots, val_accuracy=val_accuracy, host_params=HOST_PARAMS, seed_params=seed_params, **kw)


def objective_of(state, reward: RewardFunction) -> float:
    return objective(state, reward.config.param_price, reward.config.compute_price)


def episode_return(reward: RewardFunction, path) -> float:
    """The undiscounted return of a trajectory of signals, the last step terminal."""
    n = len(path) - 1
    return sum(reward(path[t], path[t + 1], terminal=t == n - 1).total for t in range(n))


# --------------------------------------------------------------------------- trajectories
SEED_STAGES = [
    SeedStage.GERMINATED,
    SeedStage.TRAINING,
    SeedStage.BLENDING,
    SeedStage.PROBATIONARY,
    SeedStage.FOSSILIZED,
    SeedStage.CULLED,
    SeedStage.EMBARGOED,
    SeedStage.DORMANT,
]
step_states = st.fixed_dictionaries(
    {name: st.sampled_from(SEED_STAGES) for name in SLOTS}
)  # any stage in every slot: lifecycle order does not matter to what a return may earn
accuracies = st.integers(0, 2000).map(lambda k: k / 20)
"""Accuracy in points on a selection split of 2,000 examples: a multiple of 0.05."""


@st.composite
def trajectories(draw, accuracy=None):
    """A start with no seed (as every episode starts) and 1..20 later states, each with any seeds,
    parameter counts and accuracy (or the given constant accuracy: seeds that change nothing),
    and extra training compute that only grows (each epoch spends some, or none)."""
    n = draw(st.integers(1, 20))
    params = draw(st.integers(0, 3 * HOST_PARAMS))
    start = draw(accuracies) if accuracy is None else accuracy
    path = [signals(val_accuracy=start)]
    spent = 0.0
    for _ in range(n):
        acc = draw(accuracies) if accuracy is None else accuracy
        spent += draw(st.sampled_from([0.0, 0.0, 0.01, 0.025, 0.1]))
        path.append(signals(draw(step_states), val_accuracy=acc, params=params, extra_compute_share=spent))
    return path


@settings(max_examples=300, deadline=None)
@given(trajectories(), st.floats(0.0, 5.0), st.floats(0.0, 20.0), st.floats(0.01, 1.0))
def test_the_return_of_an_episode_is_its_objective_gain(path, price, compute_price, weight) -> None:
    config = RewardConfig(param_price=price, compute_price=compute_price, accuracy_weight=weight)
    reward = RewardFunction(config, ppo_gamma=1.0)
    expected = weight * (objective_of(path[-1], reward) - objective_of(path[0], reward))
    assert math.isclose(episode_return(reward, path), expected, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(trajectories(), trajectories(), st.floats(0.0, 5.0), st.sampled_from(["dense", "sparse"]))
def test_higher_final_accuracy_at_equal_parameters_earns_a_higher_return(a, b, price, mode) -> None:
    """Two episodes from the same start that end with the same parameters: the one that ends
    more accurate on the selection split earns more, whatever happened on the way."""
    reward = RewardFunction(RewardConfig(mode=mode, param_price=price), ppo_gamma=1.0)
    b = [a[0], *b[1:]]
    end = dataclasses.replace(b[-1], slots=a[-1].slots, seed_params=a[-1].seed_params)
    b[-1] = end
    if a[-1].val_accuracy == end.val_accuracy:
        return
    higher, lower = (a, b) if a[-1].val_accuracy > end.val_accuracy else (b, a)
    assert episode_return(reward, higher) > episode_return(reward, lower)


@settings(max_examples=300, deadline=None)
@given(trajectories(accuracy=50.0), st.floats(0.0, 5.0), st.floats(0.0, 20.0), st.sampled_from([1.0, 0.99, 0.9]))
def test_a_seed_that_does_nothing_never_earns_a_positive_return(path, price, compute_price, gamma) -> None:
    """Seeds that change no accuracy, through any lifecycle path, kept or culled: the return is
    at most 0 (exactly 0 when nothing is kept and no compute priced at gamma 1), for any shaping
    discount. With a compute price, a seed grown and culled has cost what it spent."""
    config = RewardConfig(param_price=price, compute_price=compute_price, gamma=gamma)
    reward = RewardFunction(config, ppo_gamma=gamma)
    total = episode_return(reward, path)
    assert total <= 1e-9
    if gamma == 1.0 and path[-1].seed_params == 0:
        spent = compute_price * path[-1].extra_compute_share
        assert math.isclose(total, -reward.config.accuracy_weight * spent, abs_tol=1e-9)


@settings(max_examples=300, deadline=None)
@given(
    trajectories(),
    st.lists(accuracies, min_size=20, max_size=20),
    st.floats(0.0, 5.0),
    st.floats(0.0, 20.0),
    st.floats(0.01, 1.0),
)
def test_with_a_static_baseline_the_return_is_the_gain_over_the_static_twin(path, twin, price, compute, weight) -> None:
    """The twin starts where the episode starts (same seed); whatever either does on the way, a
    dense return with the baseline telescopes to the final objective minus the twin's accuracy
    (the twin spends no extra compute and adds no parameters, so its objective is its accuracy)."""
    static = [path[0].val_accuracy, *twin[: len(path) - 1]]
    config = RewardConfig(param_price=price, compute_price=compute, accuracy_weight=weight, static_baseline=True)
    reward = RewardFunction(config, 1.0)
    n = len(path) - 1
    total = sum(reward(path[t], path[t + 1], t == n - 1, False, static[t + 1] - static[t]).total for t in range(n))
    assert math.isclose(total, weight * (objective_of(path[-1], reward) - static[-1]), rel_tol=1e-9, abs_tol=1e-9)


def test_the_static_gain_is_given_exactly_when_the_reward_has_a_static_baseline() -> None:
    with pytest.raises(ValueError, match="static_gain must be given exactly when"):
        RewardFunction(RewardConfig(static_baseline=True), 1.0)(signals(), signals(), terminal=False)
    with pytest.raises(ValueError, match="static_gain must be given exactly when"):
        RewardFunction(RewardConfig(), 1.0)(signals(), signals(), False, False, 0.5)
    parts = RewardFunction(RewardConfig(static_baseline=True, accuracy_weight=0.1), 1.0)(
        signals(), signals(val_accuracy=52.0), False, False, 1.5
    )
    assert parts.accuracy == pytest.approx(0.2) and parts.static_baseline == pytest.approx(-0.15)


# A seed's life in one slot, as the stages it passes through before being culled.
LIVE = [SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY]
lives = st.lists(st.sampled_from(LIVE), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(lives, st.sampled_from(SLOTS), st.floats(0.5, 1.0), st.integers(0, 3000))
def test_germinate_then_cull_earns_nothing_but_the_accuracy_it_caused(stages, name, gamma, params) -> None:
    """From empty to empty: discounted shaping telescopes to exactly 0 (undiscounted, to <= 0),
    and the parameter cost is refunded at the cull."""
    reward = RewardFunction(RewardConfig(gamma=gamma), ppo_gamma=gamma)
    path = [
        signals(),
        *(signals({name: stage}, params=params) for stage in stages),
        signals({name: SeedStage.CULLED}),
    ]
    parts = [reward(s, nxt, terminal=False) for s, nxt in itertools.pairwise(path)]
    discounted = sum(gamma**t * p.shaping for t, p in enumerate(parts))
    assert math.isclose(discounted, 0.0, abs_tol=1e-9)
    assert sum(p.shaping for p in parts) <= 1e-12
    assert math.isclose(sum(p.parameter_cost for p in parts), 0.0, abs_tol=1e-12)
    assert all(p.accuracy == 0.0 for p in parts)


# --------------------------------------------------------------------------- single steps
def test_gamma_mismatch_is_a_value_error_not_an_assert() -> None:
    with pytest.raises(ValueError, match=r"shaping gamma \(0.9\) must equal the PPO gamma \(0.99\)"):
        RewardFunction(RewardConfig(gamma=0.9), ppo_gamma=0.99)
    with pytest.raises(ValueError, match="shaping gamma"):
        TrainerConfig(episodes=1, n_envs=1, reward=RewardConfig(gamma=0.95))


def test_the_trainer_defaults_to_an_undiscounted_return() -> None:
    config = TrainerConfig(episodes=1, n_envs=1)
    assert config.ppo.gamma == config.reward.gamma == 1.0


def test_bad_reward_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown reward mode 'contribution'; choose from: dense sparse"):
        RewardConfig(mode="contribution")
    with pytest.raises(ValueError, match="param_price must be >= 0"):
        RewardConfig(param_price=-1.0)
    with pytest.raises(ValueError, match=r"compute_price must be >= 0, got -0\.5"):
        RewardConfig(compute_price=-0.5)


def test_an_epoch_pays_the_compute_it_spent_and_a_cull_refunds_none() -> None:
    reward = RewardFunction(RewardConfig(compute_price=10.0), ppo_gamma=1.0)
    before = signals({"late": SeedStage.TRAINING}, params=200, extra_compute_share=0.02)
    after = signals({"late": SeedStage.TRAINING}, params=200, extra_compute_share=0.05)
    assert reward(before, after, terminal=False).compute_cost == pytest.approx(-0.1 * 10.0 * 0.03)
    culled = signals({"late": SeedStage.CULLED}, extra_compute_share=0.05)
    assert reward(after, culled, terminal=False).compute_cost == 0.0
    sparse = RewardFunction(RewardConfig(mode="sparse", compute_price=10.0), ppo_gamma=1.0)
    assert sparse(before, culled, terminal=True).terminal == pytest.approx(0.1 * (50.0 - 10.0 * 0.05))


def test_one_potential_sums_every_slot() -> None:
    s = signals({"early": SeedStage.TRAINING, "late": SeedStage.FOSSILIZED})
    assert potential(s) == STAGE_POTENTIAL[SeedStage.TRAINING] + STAGE_POTENTIAL[SeedStage.FOSSILIZED]
    assert potential(signals()) == 0.0


def test_a_germination_pays_the_price_of_its_parameters_once() -> None:
    before, after = signals(), signals({"early": SeedStage.TRAINING}, params=200)
    assert REWARD(before, after, terminal=False).parameter_cost == pytest.approx(-0.1 * 1.0 * 200 / HOST_PARAMS)
    assert REWARD(after, after, terminal=False).parameter_cost == 0.0  # no rent while it stays
    culled = signals({"early": SeedStage.CULLED})
    assert REWARD(after, culled, terminal=False).parameter_cost == pytest.approx(0.1 * 200 / HOST_PARAMS)


def test_a_seed_that_buys_its_price_is_worth_keeping() -> None:
    """A seed of 200 parameters on a 1,000-parameter host at price 1 costs 0.2 points: buying
    0.3 points nets a positive return, 0.1 a negative one."""
    start = signals(val_accuracy=50.0)
    for gain, sign in ((0.3, 1), (0.1, -1)):
        end = signals({"mid": SeedStage.FOSSILIZED}, val_accuracy=50.0 + gain, params=200)
        assert sign * episode_return(REWARD, [start, end]) > 0


def test_accuracy_term_is_the_change_in_selection_accuracy() -> None:
    r = REWARD(signals(val_accuracy=50.0), signals(val_accuracy=53.0), terminal=False)
    assert r.accuracy == pytest.approx(0.3)


def test_terminal_state_has_zero_potential() -> None:
    state = signals({"early": SeedStage.FOSSILIZED})
    r = REWARD(state, state, terminal=True)
    assert r.shaping == pytest.approx(-0.1 * STAGE_POTENTIAL[SeedStage.FOSSILIZED])


def test_panic_costs_the_penalty() -> None:
    r = REWARD(signals(), signals(), terminal=True, panic=True)
    assert r.panic == -5.0


def test_sparse_mode_pays_the_objective_only_at_the_end() -> None:
    sparse = RewardFunction(RewardConfig(mode="sparse"), 1.0)
    state = signals({"early": SeedStage.BLENDING}, params=100, val_accuracy=40.0)
    after = signals({"early": SeedStage.BLENDING}, params=100, val_accuracy=45.0)
    assert sparse(state, after, terminal=False).total == 0.0
    end = sparse(state, after, terminal=True)
    assert end.terminal == pytest.approx(0.1 * (45.0 - 1.0 * 100 / HOST_PARAMS))
    assert end.total == end.terminal


def test_breakdown_total_is_the_sum_of_its_parts() -> None:
    state = signals({"early": SeedStage.PROBATIONARY}, params=100)
    after = signals({"early": SeedStage.FOSSILIZED}, params=300, val_accuracy=52.0)
    r = REWARD(state, after, terminal=False)
    parts = dataclasses.asdict(r)
    assert r.total == pytest.approx(sum(parts.values()))
    assert r.to_json() == parts
