"""Rewards: (state, action, next state) for the touched slot, potential-based shaping, rent, sparse mode."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import training_signals
from esper.leyline import BlendSchedule, Decision, LifecycleOp, SeedStage
from esper.simic import RewardConfig, RewardFunction
from esper.simic.rewards import STAGE_POTENTIAL, potential
from esper.simic.vectorized import TrainerConfig
from esper.tamiyo import SlotSignals

SLOTS = ("early", "mid", "late")
GAMMA = 0.99
REWARD = RewardFunction(RewardConfig(gamma=GAMMA), ppo_gamma=GAMMA)


def slot(name: str, stage: SeedStage = SeedStage.DORMANT, contribution: float | None = None, params: int = 0):
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
        contribution=contribution,
        grad_norm=None,
        param_count=params if has_seed else 0,
    )


def signals(stages: dict[str, SeedStage] | None = None, contributions=None, val_accuracy=50.0, params=0, **kw):
    stages, contributions = stages or {}, contributions or {}
    slots = [
        slot(n, stages.get(n, SeedStage.DORMANT), contributions.get(n), params if n in stages else 0) for n in SLOTS
    ]
    seed_params = sum(s.param_count for s in slots)
    return training_signals(slots, val_accuracy=val_accuracy, host_params=1000, seed_params=seed_params, **kw)


def test_gamma_mismatch_is_a_value_error_not_an_assert() -> None:
    with pytest.raises(ValueError, match=r"shaping gamma \(0.9\) must equal the PPO gamma \(0.99\)"):
        RewardFunction(RewardConfig(gamma=0.9), ppo_gamma=0.99)
    with pytest.raises(ValueError, match="shaping gamma"):
        TrainerConfig(episodes=1, n_envs=1, reward=RewardConfig(gamma=0.95))


def test_unknown_reward_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown reward mode 'dense'; choose from: contribution sparse"):
        RewardConfig(mode="dense")


def test_one_potential_sums_every_slot() -> None:
    s = signals({"early": SeedStage.TRAINING, "late": SeedStage.FOSSILIZED})
    assert potential(s) == STAGE_POTENTIAL[SeedStage.TRAINING] + STAGE_POTENTIAL[SeedStage.FOSSILIZED]
    assert potential(signals()) == 0.0


def test_attribution_reads_the_touched_slot_not_the_first_seed() -> None:
    state = signals(
        {"early": SeedStage.PROBATIONARY, "late": SeedStage.PROBATIONARY}, contributions={"early": 9.0, "late": 2.0}
    )
    after = signals({"early": SeedStage.PROBATIONARY, "late": SeedStage.FOSSILIZED}, contributions={"early": 9.0})
    r = REWARD(state, Decision(LifecycleOp.FOSSILIZE, "late"), after, terminal=False)
    assert r.attribution == pytest.approx(0.1 * 2.0)
    culled = signals({"early": SeedStage.PROBATIONARY}, contributions={"early": 9.0})
    r = REWARD(state, Decision(LifecycleOp.CULL, "late"), culled, terminal=False)
    assert r.attribution == pytest.approx(-0.1 * 2.0)


def test_wait_touches_no_slot() -> None:
    state = signals({"early": SeedStage.PROBATIONARY}, contributions={"early": 9.0})
    assert REWARD(state, Decision.wait(), state, terminal=False).attribution == 0.0


def test_culling_a_harmful_seed_earns_no_attribution() -> None:
    """The accuracy term already pays for the recovery; paying again would make harm profitable."""
    state = signals({"mid": SeedStage.BLENDING}, contributions={"mid": -4.0})
    r = REWARD(state, Decision(LifecycleOp.CULL, "mid"), signals(), terminal=False)
    assert r.attribution == 0.0


def test_rent_charges_the_seeds_share_of_parameters() -> None:
    state = signals({"early": SeedStage.TRAINING}, params=200)
    r = REWARD(state, Decision.wait(), state, terminal=False)
    assert r.rent == pytest.approx(-0.5 * 200 / 1000)
    assert REWARD(signals(), Decision.wait(), signals(), terminal=False).rent == 0.0


def test_accuracy_term_is_the_change_in_validation_accuracy() -> None:
    r = REWARD(signals(val_accuracy=50.0), Decision.wait(), signals(val_accuracy=53.0), terminal=False)
    assert r.accuracy == pytest.approx(0.3)


def test_terminal_state_has_zero_potential() -> None:
    state = signals({"early": SeedStage.FOSSILIZED})
    r = REWARD(state, Decision.wait(), state, terminal=True)
    assert r.shaping == pytest.approx(-0.1 * STAGE_POTENTIAL[SeedStage.FOSSILIZED])


def test_panic_costs_the_penalty() -> None:
    r = REWARD(signals(), Decision.wait(), signals(), terminal=True, panic=True)
    assert r.panic == -5.0


def test_sparse_mode_pays_only_at_the_end() -> None:
    sparse = RewardFunction(RewardConfig(mode="sparse", gamma=GAMMA), GAMMA)
    state = signals({"early": SeedStage.BLENDING}, params=100, val_accuracy=40.0)
    after = signals({"early": SeedStage.BLENDING}, params=100, val_accuracy=45.0)
    assert sparse(state, Decision.wait(), after, terminal=False).total == 0.0
    end = sparse(state, Decision.wait(), after, terminal=True)
    assert end.terminal == pytest.approx(0.1 * 45.0 - 0.5 * 0.1 * after.max_epochs)
    assert end.total == end.terminal


# A seed's life in one slot, as the stages it passes through before being culled.
LIVE = [SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY]
lives = st.lists(st.sampled_from(LIVE), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(lives, st.sampled_from(SLOTS), st.floats(0.5, 1.0))
def test_germinate_then_cull_earns_no_net_shaping(stages, name, gamma) -> None:
    """From empty to empty, discounted shaping telescopes to exactly 0, and undiscounted it is <= 0."""
    reward = RewardFunction(RewardConfig(gamma=gamma), ppo_gamma=gamma)
    path = [signals(), *(signals({name: stage}) for stage in stages), signals({name: SeedStage.CULLED})]
    decisions = [
        Decision(LifecycleOp.GERMINATE, name, "conv_light", BlendSchedule.LINEAR),
        *([Decision.wait()] * (len(stages) - 1)),
        Decision(LifecycleOp.CULL, name),
    ]
    shaping = [
        reward(s, d, nxt, terminal=False).shaping for s, d, nxt in zip(path[:-1], decisions, path[1:], strict=True)
    ]
    discounted = sum(gamma**t * f for t, f in enumerate(shaping))
    assert math.isclose(discounted, 0.0, abs_tol=1e-9)
    assert sum(shaping) <= 1e-12


@settings(max_examples=200, deadline=None)
@given(lives, st.floats(-10, 10), st.floats(0, 500))
def test_no_germinate_cull_cycle_is_profitable_beyond_accuracy(stages, contribution, params) -> None:
    """Every non-accuracy term of a cycle sums to <= 0: shaping nets out, rent and attribution only cost."""
    name = "mid"
    path = [
        signals(),
        *(signals({name: s}, contributions={name: contribution}, params=int(params)) for s in stages),
        signals({name: SeedStage.CULLED}),
    ]
    decisions = [
        Decision(LifecycleOp.GERMINATE, name, "conv_light", BlendSchedule.LINEAR),
        *([Decision.wait()] * (len(stages) - 1)),
        Decision(LifecycleOp.CULL, name),
    ]
    total = 0.0
    for s, d, nxt in zip(path[:-1], decisions, path[1:], strict=True):
        r = REWARD(s, d, nxt, terminal=False)
        total += r.total - r.accuracy
    assert total <= 1e-9


def test_breakdown_total_is_the_sum_of_its_parts() -> None:
    state = signals({"early": SeedStage.PROBATIONARY}, contributions={"early": 3.0}, params=100)
    after = signals({"early": SeedStage.FOSSILIZED}, params=100, val_accuracy=52.0)
    r = REWARD(state, Decision(LifecycleOp.FOSSILIZE, "early"), after, terminal=False)
    parts = dataclasses.asdict(r)
    assert r.total == pytest.approx(sum(parts.values()))
    assert r.to_json() == parts
