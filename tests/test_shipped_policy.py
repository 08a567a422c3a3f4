"""The policy shipped for `shapes` (`policy:shapes`): small, loadable with `weights_only=True`, a
controller for the real task, refused on the seeds it trained on, and recorded with the command
that trained it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import torch

from esper.scripts.evaluate import parse_controller
from esper.scripts.train import main
from esper.simic import PolicyController
from esper.tamiyo import trained_policy_names, trained_policy_path, trained_policy_record
from test_cli import check_usage_error

REPO = Path(__file__).resolve().parents[1]


def test_the_shapes_policy_ships_small_and_loads_with_weights_only() -> None:
    assert "shapes" in trained_policy_names()
    path = trained_policy_path("shapes")
    assert path is not None and path.stat().st_size < 2_000_000
    payload = torch.load(path, map_location="cpu", weights_only=True)
    assert "optimizer" not in payload["learner"], "acting reads no optimizer state"
    controller = PolicyController.from_checkpoint(path)
    assert controller.task_name == "shapes"
    record = trained_policy_record("shapes")
    assert record["task"] == "shapes"
    script = record["command"].removeprefix("bash ")
    assert script != record["command"] and (REPO / script).is_file(), "the command is a script in the repository"
    assert sorted(record["training_seeds"]) == sorted(int(s) for s in payload["training_seeds"])
    assert parse_controller("policy:shapes").path == str(path)


def test_the_shapes_policy_is_the_recipe_script_s_second_stage() -> None:
    """The shipped file's own settings are those of the script's stage 2 (so the command its
    record names is the one that made it), and its training seeds are the two stages' own."""
    payload = torch.load(trained_policy_path("shapes"), map_location="cpu", weights_only=True)
    settings = payload["settings"]
    script = (REPO / trained_policy_record("shapes")["command"].removeprefix("bash ")).read_text()
    stage_two = {
        "--seed": settings["seed"],
        "--clone-episodes": settings["clone_episodes"],
        "--clone-teacher": settings["clone_teacher"],
        "--clone-decisions": settings["clone_decisions"],
        "--clone-steps": settings["clone_steps"],
        "--clone-anchor": f"{settings['clone_anchor']:g}",
        "--slots": " ".join(settings["slots"]),
        "--blueprints": " ".join(settings["blueprints"]),
        "--episodes": settings["episodes"],
        "--n-envs": settings["n_envs"],
    }
    for flag, value in stage_two.items():
        assert f"{flag} {value}" in script, f"{flag} {value}"
    seeds = {int(s) for s in payload["training_seeds"]}
    assert seeds <= set(range(12000, 12038)) | set(range(15000, 15013)), "stage 1's seeds and stage 2's"


def test_eval_refuses_the_shapes_policy_on_a_seed_it_trained_on(capsys) -> None:
    seed = min(trained_policy_record("shapes")["training_seeds"])
    argv = ["eval", "--task", "shapes", "--controllers", "heuristic", "policy:shapes", "--seeds", f"{seed}:{seed + 2}"]
    check_usage_error(capsys, argv, f"policy:shapes was trained on seed {seed}")


def test_grow_runs_the_shapes_policy_on_the_real_task(workdir, tmp_path) -> None:
    """`esper grow --controller policy:shapes`: the learned controller's one-command equivalent of
    `esper heuristic`, on the task it was trained for (two epochs, to stay fast)."""
    run_dir = tmp_path / "grown"
    assert (
        main(["grow", "--controller", "policy:shapes", "--max-epochs", "2", "--quiet", "--run-dir", str(run_dir)]) == 0
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["controller"] == "policy:shapes" and summary["task"] == "shapes"


def test_the_recipe_script_refuses_a_run_directory_that_holds_a_run(tmp_path) -> None:
    """`benchmarks/train_policy_shapes.sh RUN_DIR` checks before it trains: a RUN_DIR with a
    stage's folder in it is a one-line error, exit 2, and nothing runs (ESPER points at a program
    that would fail if it did)."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "kept.txt").write_text("a finished stage")
    done = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "train_policy_shapes.sh"), str(tmp_path)],
        env={**os.environ, "ESPER": "false"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and str(tmp_path) in done.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["base", "kept.txt"]
