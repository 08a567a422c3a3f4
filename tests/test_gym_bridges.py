"""Bridges to the RL ecosystem: sb3-contrib's masks, the exact joint-discrete wrapper, the
registered Gymnasium id and the shaping gamma taken from the caller."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

sys.path.insert(0, str(Path(__file__).parent))
import esper  # noqa: F401  (registers esper/Morphogenetic-v0)
from conftest import tiny_shapes_task
from esper.leyline import LifecycleOp
from esper.simic.gymnasium_adapter import JointDiscreteActions, is_allowed
from esper.simic.rewards import RewardConfig
from esper.tolaria import TASKS
from test_gym import gym_env


def executable_count(masks: dict[str, np.ndarray]) -> int:
    """Joint actions the conditional masks allow, counted head by head (independently of the
    wrapper): per op, per slot it may act on, the product of the later heads' valid choices (the
    blueprint mask is given per op and slot)."""
    total = 0
    for op in np.flatnonzero(masks["op"]):
        active = masks["head_active"][op]
        for slot in np.flatnonzero(masks["slot"][op]) if active[1] else [0]:
            count = 1
            for k, name in ((2, "blueprint"), (3, "schedule")):
                if active[k]:
                    count *= int((masks[name][op, slot] if masks[name].ndim == 3 else masks[name][op]).sum())
            total += count
    return total


def test_the_joint_wrapper_masks_exactly_the_executable_actions() -> None:
    env = JointDiscreteActions(gym_env(max_epochs=4, slots=("early", "mid")))
    _, info = env.reset(seed=3)
    rng = np.random.default_rng(0)
    done = False
    while not done:
        mask = env.action_masks()
        assert mask.sum() == executable_count(info["action_masks"])
        for index in range(env.action_space.n):
            assert mask[index] == is_allowed(env.joint_actions[index], info["action_masks"])
        choice = int(rng.choice(np.flatnonzero(mask)))
        _, _, done, _, info = env.step(choice)
        assert not info["invalid_action"]
    assert env.base.invalid_actions == 0
    wait = [i for i, a in enumerate(env.joint_actions) if a[0] == LifecycleOp.WAIT]
    assert len(wait) == 1, "WAIT uses no other head: one joint action"


def test_the_multidiscrete_masks_cover_every_executable_choice() -> None:
    env = gym_env(slots=("early", "mid"))
    _, info = env.reset(seed=1)
    flat = env.action_masks()
    sizes = env.actions.head_sizes
    assert flat.shape == (sum(sizes),) and flat.dtype == bool
    heads = np.split(flat, np.cumsum(sizes)[:-1])
    joint = JointDiscreteActions(gym_env(slots=("early", "mid")))
    joint.reset(seed=1)
    for action in joint.joint_actions[joint.action_masks()]:
        assert all(heads[k][action[k]] for k in range(len(sizes)) if info["action_masks"]["head_active"][action[0], k])


def test_a_reward_with_another_shaping_gamma_is_refused(monkeypatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    with pytest.raises(ValueError, match=r"shaping gamma 1.0 differs from the agent's gamma 0.99"):
        gymnasium.make("esper/Morphogenetic-v0", gamma=0.99, reward=RewardConfig(gamma=1.0), max_epochs=2)
    made = gymnasium.make("esper/Morphogenetic-v0", gamma=0.99, reward=RewardConfig(gamma=0.99, param_price=2.0))
    assert made.unwrapped.reward_fn.config == RewardConfig(gamma=0.99, param_price=2.0)
    assert gym_env().reward_fn.config.gamma == 1.0
    with pytest.raises(ValueError, match="static_baseline needs the PPO trainer's static twin"):
        gymnasium.make("esper/Morphogenetic-v0", gamma=1.0, reward=RewardConfig(static_baseline=True), max_epochs=2)


@pytest.mark.slow
def test_the_registered_id_makes_an_env_that_passes_check_env(monkeypatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    env = gymnasium.make("esper/Morphogenetic-v0", task="shapes", gamma=0.99, max_epochs=2)
    check_env(env.unwrapped)
    joint = gymnasium.make("esper/Morphogenetic-v0", task="shapes", gamma=0.99, max_epochs=2, joint_actions=True)
    check_env(joint.unwrapped)
    assert isinstance(joint.action_space, gymnasium.spaces.Discrete)


@pytest.mark.slow
def test_maskable_ppo_drives_the_joint_wrapper_with_no_invalid_action(monkeypatch) -> None:
    sb3_contrib = pytest.importorskip("sb3_contrib")
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    env = gymnasium.make("esper/Morphogenetic-v0", task="shapes", gamma=0.99, max_epochs=6, joint_actions=True)
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=60, batch_size=30, n_epochs=2, gamma=0.99, seed=0)
    model.learn(total_timesteps=300)
    base = env.unwrapped
    assert model.num_timesteps >= 300
    assert base.invalid_actions == 0
    assert math.isfinite(float(model.logger.name_to_value.get("train/loss", 0.0)))
