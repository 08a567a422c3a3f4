"""A learned policy drives a single env as a Controller, fresh or loaded from a ppo checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import make_env, tiny_shapes_task
from esper.leyline import LifecycleOp
from esper.scripts.cli import main
from esper.simic import CheckpointError, PolicyController
from esper.simic.checkpoint import read_checkpoint
from esper.tolaria import TASKS, run_episode


def decisions_of(controller: PolicyController, rng_seed: int = 0) -> list:
    env = make_env(max_epochs=4)
    seen = []
    original = controller.decide

    def decide(signals):
        decision = original(signals)
        seen.append(decision)
        return decision

    controller.decide = decide
    outcome = run_episode(env, controller, rng_seed=rng_seed, episode=0)
    assert len(seen) == 4 and 0.0 <= outcome.final_test_accuracy <= 100.0
    return seen


@pytest.mark.slow
def test_a_fresh_policy_drives_an_episode_with_executable_decisions() -> None:
    """Sampling from an untrained policy explores: over a few episodes it germinates somewhere,
    and the env executes every decision (a refused one would raise)."""
    ops = []
    for seed in range(3):
        controller = PolicyController.fresh(tiny_shapes_task(), greedy=False, rng_seed=seed)
        ops += [d.op for d in decisions_of(controller)]
    assert LifecycleOp.GERMINATE in ops


def test_a_greedy_policy_decides_the_same_way_every_time() -> None:
    assert decisions_of(PolicyController.fresh(tiny_shapes_task())) == decisions_of(
        PolicyController.fresh(tiny_shapes_task())
    )


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


def test_a_trained_policy_loads_from_its_checkpoint_and_drives_an_env(tiny_shapes, workdir: Path, tmp_path) -> None:
    run_dir = tmp_path / "run"
    argv = ["ppo", "--episodes", "2", "--n-envs", "2", "--max-epochs", "2", "--quiet", "--run-dir", str(run_dir)]
    assert main([*argv, "--gates.embargo_epochs", "3"]) == 0
    checkpoint = run_dir / "checkpoints" / "round-0001.pt"
    controller = PolicyController.from_checkpoint(checkpoint)
    assert controller.thresholds.embargo_epochs == 3  # the run's own gates shape its masks
    payload = read_checkpoint(checkpoint)
    for name, tensor in controller.policy.state_dict().items():
        assert torch.equal(tensor, payload["learner"]["policy"][name])
    assert torch.equal(controller.obs_norm.mean, payload["learner"]["obs_norm"]["mean"])
    decisions_of(controller)


@pytest.mark.slow
def test_a_policy_acts_only_in_the_slots_it_was_trained_with() -> None:
    """In an env that enables every slot, a policy trained with `--slots mid` germinates, keeps
    and culls only there: the other slots are masked for it as they were in training."""
    acted = set()
    for seed in range(6):
        controller = PolicyController.fresh(tiny_shapes_task(), greedy=False, rng_seed=seed, slots=("mid",))
        acted |= {d.slot for d in decisions_of(controller) if d.op is not LifecycleOp.WAIT}
    assert acted == {"mid"}
    unrestricted = set()
    for seed in range(6):
        controller = PolicyController.fresh(tiny_shapes_task(), greedy=False, rng_seed=seed)
        unrestricted |= {d.slot for d in decisions_of(controller) if d.op is not LifecycleOp.WAIT}
    assert unrestricted - {"mid"}  # the same policies, unrestricted, do act elsewhere


def test_a_checkpoint_restricts_its_policy_to_the_runs_slots(tiny_shapes, workdir: Path, tmp_path) -> None:
    run_dir = tmp_path / "run"
    argv = ["ppo", "--episodes", "2", "--n-envs", "2", "--max-epochs", "2", "--quiet", "--run-dir", str(run_dir)]
    assert main([*argv, "--slots", "mid"]) == 0
    assert PolicyController.from_checkpoint(run_dir / "checkpoints" / "round-0001.pt").slots == ("mid",)


def test_a_checkpoint_restricts_its_policy_to_the_runs_blueprints(tiny_shapes, workdir: Path, tmp_path) -> None:
    """A policy trained with `--blueprints depthwise` could germinate any blueprint once loaded."""
    run_dir = tmp_path / "run"
    argv = ["ppo", "--episodes", "2", "--n-envs", "2", "--max-epochs", "2", "--quiet", "--run-dir", str(run_dir)]
    assert main([*argv, "--blueprints", "depthwise"]) == 0
    policy = PolicyController.from_checkpoint(run_dir / "checkpoints" / "round-0001.pt")
    allowed = policy.spaces.actions.blueprint_mask()
    assert [b for b, ok in zip(policy.spaces.actions.blueprints, allowed.tolist(), strict=True) if ok] == ["depthwise"]


def test_a_checkpoint_that_does_not_fit_the_task_is_refused(tiny_shapes, workdir: Path, tmp_path) -> None:
    run_dir = tmp_path / "run"
    argv = ["ppo", "--episodes", "2", "--n-envs", "2", "--max-epochs", "2", "--quiet", "--run-dir", str(run_dir)]
    assert main(argv) == 0
    checkpoint = run_dir / "checkpoints" / "round-0001.pt"
    payload = torch.load(checkpoint, weights_only=True)
    payload["spaces"]["observation_layout"] = payload["spaces"]["observation_layout"][:-1]
    torch.save(payload, tmp_path / "bent.pt")
    with pytest.raises(CheckpointError, match="observation layout"):
        PolicyController.from_checkpoint(tmp_path / "bent.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        PolicyController.from_checkpoint(tmp_path / "missing.pt")


@pytest.mark.slow
def test_the_docs_example_of_a_policy_as_a_controller_runs(workdir: Path) -> None:
    """docs/learning.md's Python example, exactly as printed there."""
    page = (Path(__file__).parents[1] / "docs" / "learning.md").read_text()
    block = page.split("<!-- example: a policy as a controller -->")[1].split("```python")[1].split("```")[0]
    assert len(block.strip().splitlines()) <= 10
    exec(compile(block, "docs/learning.md", "exec"), {})
