"""Behaviour cloning: a policy taught the heuristic's own episodes acts as the heuristic did."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_env
from esper.kasmina import Topology
from esper.leyline import BlendSchedule, Decision, LifecycleOp
from esper.simic.cloning import clone, demonstrate
from esper.simic.loop import make_learner
from esper.simic.rewards import RewardConfig, RewardFunction
from esper.tamiyo import HeuristicConfig, HeuristicController, PolicySpaces

SLOTS = ("early", "mid", "late")


@settings(max_examples=50, deadline=None)
@given(
    st.sampled_from(list(LifecycleOp)),
    st.sampled_from(SLOTS),
    st.integers(min_value=0, max_value=5),
    st.sampled_from(list(BlendSchedule)),
)
def test_encode_is_the_inverse_of_decode(op: LifecycleOp, slot: str, blueprint: int, schedule: BlendSchedule) -> None:
    actions = PolicySpaces.derive(Topology.CNN, SLOTS).actions
    decision = actions.decode(int(op), SLOTS.index(slot), blueprint, int(schedule))
    again = actions.decode(*actions.encode(decision))
    assert (again.op, again.slot, again.blueprint, again.schedule) == (
        decision.op,
        decision.slot,
        decision.blueprint,
        decision.schedule,
    )
    assert actions.encode(Decision.wait()) == (0, 0, 0, 0)


@pytest.mark.slow
def test_a_cloned_policy_takes_the_demonstrated_actions() -> None:
    """Germinating from the first epoch, the heuristic's episodes hold germinations, waits and
    (with a short episode) the lifecycle's later ops; a cloned policy's greedy choices agree with
    them, and with the demonstrated ops it never saw masked away."""
    env = make_env(max_epochs=10)
    spaces = PolicySpaces.derive(Topology.CNN, SLOTS)
    config = HeuristicConfig(warmup_epochs=0, plateau_patience=0, germination_cooldown=0)
    heuristic = HeuristicController(Topology.CNN, SLOTS, config=config, thresholds=env.config.thresholds)
    reward = RewardFunction(RewardConfig(), 1.0)
    demos = [demonstrate(env, heuristic, spaces, reward, rng_seed=seed, episode=seed) for seed in (0, 1)]
    ops = torch.cat([d.actions[:, 0] for d in demos])
    assert {int(LifecycleOp.WAIT), int(LifecycleOp.GERMINATE)} <= set(ops.tolist())
    for d in demos:
        assert d.raw_obs.shape == (10, spaces.layout.obs_dim)
        assert bool(d.masks.any(-1).all())
        assert d.returns[0] == pytest.approx(float(d.rewards.sum()))
    learner = make_learner(spaces, hidden=32, learning_rate=3e-3, rng_seed=0)
    before, after = clone(learner, demos, epochs=150)
    assert after.action_nll < before.action_nll / 4
    assert after.agreement >= 0.9 > before.agreement
