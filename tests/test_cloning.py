"""Behaviour cloning: a policy taught the heuristic's own episodes acts as the heuristic did."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import esper.scripts.ppo as ppo_script
from conftest import make_env, tiny_shapes_task
from esper.kasmina import Topology
from esper.leyline import BlendSchedule, Decision, LifecycleOp
from esper.scripts.train import main
from esper.simic.cloning import clone, demonstrate
from esper.simic.loop import make_learner
from esper.simic.rewards import RewardConfig, RewardFunction
from esper.tamiyo import HeuristicConfig, HeuristicController, PolicySpaces, tuned_heuristic
from esper.tolaria import TASKS
from test_cli import check_usage_error, plateau_task

SLOTS = ("early", "mid", "late")


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


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
    before, after = clone(learner, demos, steps=150, learning_rate=3e-3)
    assert after.action_nll < before.action_nll / 4
    assert after.agreement >= 0.9 > before.agreement


class GrowsAt:
    """Waits, and germinates `conv_heavy` in `early` once, at the epoch given."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def reset(self) -> None:
        pass

    def decide(self, signals) -> Decision:
        if signals.epoch == self.epoch:
            return Decision(LifecycleOp.GERMINATE, "early", "conv_heavy")
        return Decision(LifecycleOp.WAIT)

    def record_step(self, decision, changes) -> None:
        pass


def test_a_static_demonstration_under_a_static_baseline_earns_exactly_nothing() -> None:
    """The twin a demonstration subtracts is the static host on the same seed and data order: a
    demonstrator that only waits is that host, so every reward is 0 to the last bit; one that
    grows differs from it only once it has grown."""
    env = make_env(max_epochs=5)
    spaces = PolicySpaces.derive(Topology.CNN, SLOTS)
    reward = RewardFunction(RewardConfig(static_baseline=True), 1.0)
    demo = demonstrate(env, GrowsAt(99), spaces, reward, rng_seed=3, episode=0)
    assert demo.rewards.tolist() == [0.0] * 5
    demo = demonstrate(env, GrowsAt(2), spaces, reward, rng_seed=3, episode=1)
    assert demo.actions[2, 0] == int(LifecycleOp.GERMINATE)
    assert demo.rewards[:2].tolist() == [0.0, 0.0]  # epochs 0 and 1, before the growth
    assert demo.rewards[2:].abs().sum() > 0


@pytest.mark.slow
def test_ppo_warm_starts_from_the_heuristic_and_records_its_seeds(tiny_shapes, workdir: Path, capsys) -> None:
    argv = ["ppo", "--episodes", "2", "--n-envs", "2", "--max-epochs", "3", "--seed", "5", "--clone-episodes", "2"]
    assert main([*argv, "--clone-steps", "20", "--run-dir", "run"]) == 0
    assert "warm start: cloned 2 heuristic episodes (seeds 7..8)" in capsys.readouterr().out
    checkpoint = sorted(Path("run/checkpoints").glob("round-*.pt"))[-1]
    assert torch.load(checkpoint, weights_only=True)["training_seeds"] == [7, 8, 5, 6]


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--clone-episodes", "-1", "--clone-episodes"),
        ("--clone-steps", "0", "--clone-steps"),
        ("--clone-lr", "0", "--clone-lr"),
    ],
)
def test_bad_cloning_settings_are_one_line_errors(tiny_shapes, workdir: Path, capsys, flag, value, fragment) -> None:
    check_usage_error(capsys, ["ppo", flag, value], fragment)


def test_a_demonstrated_action_the_masks_forbid_is_refused() -> None:
    """A demonstrator outside the policy's action space cannot be cloned: its log-probability is
    -inf, so the loss is infinite and the cloning teaches nothing."""
    env = make_env(max_epochs=10)  # long enough for the heuristic to germinate at once
    spaces = PolicySpaces.derive(Topology.CNN, SLOTS, ("depthwise",))
    config = HeuristicConfig(warmup_epochs=0, plateau_patience=0, germination_cooldown=0)
    heuristic = HeuristicController(Topology.CNN, SLOTS, ("conv_heavy",), config, env.config.thresholds)
    with pytest.raises(ValueError, match=r"conv_heavy.*masks forbid"):
        demonstrate(env, heuristic, spaces, RewardFunction(RewardConfig(), 1.0), rng_seed=0, episode=0)


def test_ppo_clones_the_heuristic_within_its_blueprints(workdir: Path, capsys, monkeypatch) -> None:
    """The warm start's heuristic germinated the tuned order's first blueprint whatever
    `--blueprints` allowed (the action NLL printed as inf)."""
    monkeypatch.setitem(TASKS, "shapes", plateau_task(tiny_shapes_task()))  # the heuristic grows at once
    argv = ["ppo", "--episodes", "1", "--n-envs", "1", "--max-epochs", "10", "--clone-episodes", "1"]
    assert main([*argv, "--clone-steps", "5", "--blueprints", "depthwise", "--run-dir", "run"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("warm start: cloned"))
    assert "inf" not in line, line


def test_the_warm_start_clones_the_heuristic_of_the_run_s_knobs(workdir: Path, capsys, monkeypatch) -> None:
    """`--heuristic.KNOB` changes the teacher of the warm start, over the task's tuned heuristic
    (the knobs it does not name stay tuned), and the run records the teacher it cloned."""
    monkeypatch.setitem(TASKS, "shapes", plateau_task(tiny_shapes_task()))
    teachers: list[HeuristicConfig] = []

    def recording(env, controller, *args, **kwargs):
        teachers.append(controller.config)
        return demonstrate(env, controller, *args, **kwargs)

    monkeypatch.setattr(ppo_script, "demonstrate", recording)
    argv = ["ppo", "--episodes", "1", "--n-envs", "1", "--max-epochs", "4", "--clone-episodes", "1"]
    assert main([*argv, "--clone-steps", "2", "--heuristic.cull_threshold", "0.25", "--run-dir", "run"]) == 0
    tuned = tuned_heuristic("shapes")
    assert teachers == [replace(tuned, cull_threshold=0.25)]
    recorded = json.loads(Path("run/config.json").read_text())["knobs"]["heuristic"]
    assert recorded["cull_threshold"] == 0.25
    assert recorded["fossilize_threshold"] == tuned.fossilize_threshold
