"""`esper ppo --init-policy`: a new run that starts from a trained policy (a checkpoint, a policy
file or a shipped policy), with a fresh optimizer, its observation statistics and its training
seeds; and the one-line errors for a policy that does not fit the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import tiny_shapes_task
from esper.scripts.cli import main
from esper.simic.checkpoint import policy_only
from esper.tolaria import TASKS
from test_cli import check_usage_error

TINY = ["--n-envs", "1", "--max-epochs", "3", "--quiet"]


@pytest.fixture
def first_run(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> Path:
    """A tiny run with a warm start, and its policy file (what a shipped policy is)."""
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    args = ["ppo", *TINY, "--seed", "5", "--episodes", "1", "--clone-episodes", "2", "--clone-steps", "5"]
    assert main([*args, "--run-dir", "first"]) == 0
    policy = Path("policy.pt")
    torch.save(policy_only(torch.load("first/checkpoints/round-0001.pt", weights_only=True)), policy)
    return policy


@pytest.mark.slow
def test_a_run_started_from_a_policy_file_acts_with_its_weights_and_skips_its_seeds(first_run: Path, capsys) -> None:
    """With a learning rate of 0 the new run's policy is the file's, bit for bit, and its
    observation statistics go on from the file's; the file's training seeds and clonings carry
    over, and a cloning in the new run takes seeds after them."""
    capsys.readouterr()
    args = ["ppo", *TINY, "--seed", "5", "--episodes", "1", "--init-policy", str(first_run), "--ppo.learning_rate", "0"]
    assert (
        main([*args, "--clone-episodes", "1", "--clone-lr", "1e-12", "--clone-steps", "1", "--run-dir", "second"]) == 0
    )
    start = torch.load(first_run, weights_only=True)
    second = torch.load("second/checkpoints/round-0001.pt", weights_only=True)
    for name, tensor in start["learner"]["policy"].items():
        assert torch.allclose(second["learner"]["policy"][name], tensor, atol=1e-9), name
    assert second["learner"]["obs_norm"]["count"] > start["learner"]["obs_norm"]["count"]
    assert second["learner"]["episodes_done"] == 1 and second["learner"]["round"] == 1
    # seeds: the first run cloned 6..7 and trained on 5; the new cloning takes 8, its PPO 5 again
    assert second["training_seeds"] == [6, 7, 5, 8, 5]
    assert [c["seeds"] for c in second["clonings"]] == [[6, 7], [8, 8]]
    assert second["settings"]["init_policy"] == str(first_run)
    # repeating the command after a crash resumes; it does not start from the file again
    again = ["ppo", "--resume", "last", "--run-dir", "second", "--episodes", "2", "--init-policy", str(first_run)]
    assert main([*again, "--quiet"]) == 0
    resumed = torch.load("second/checkpoints/round-0002.pt", weights_only=True)
    assert resumed["learner"]["episodes_done"] == 2
    assert resumed["learner"]["obs_norm"]["count"] > second["learner"]["obs_norm"]["count"]
    assert resumed["training_seeds"] == [6, 7, 5, 8, 5, 6]


def test_a_policy_that_does_not_fit_the_run_is_a_one_line_error(first_run: Path, capsys) -> None:
    capsys.readouterr()
    args = ["ppo", *TINY, "--episodes", "1", "--run-dir", "bad"]
    check_usage_error(capsys, [*args, "--init-policy", "nope.pt"], "--init-policy", "'nope.pt' does not exist")
    check_usage_error(capsys, [*args, "--init-policy", str(first_run), "--hidden", "16"], "--hidden 128, this run 16")
    resumed = ["ppo", "--resume", "first/checkpoints/round-0001.pt", "--episodes", "2", "--run-dir", "bad"]
    check_usage_error(capsys, [*resumed, "--init-policy", str(first_run)], "--init-policy starts a new run")
    Path("init.json").write_text(json.dumps({"init_policy": str(first_run)}))
    check_usage_error(capsys, [*resumed, "--config", "init.json"], "--init-policy starts a new run")
    assert not Path("bad").exists()
