"""The policy shipped for `shapes` (`policy:shapes`): small, loadable with `weights_only=True`, a
controller for the real task, refused on the seeds it trained on, and recorded with the command
that trained it."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import torch

from esper.runs.eval_run import parse_controller
from esper.scripts.cli import main
from esper.simic import PolicyController
from esper.simic.checkpoint import policy_sha256
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


def test_the_shapes_policy_is_the_recipe_script_s_run() -> None:
    """The shipped file's own settings are those of the script's `esper ppo` command (so the
    command its record names is the one that made it), and its training seeds are that run's."""
    payload = torch.load(trained_policy_path("shapes"), map_location="cpu", weights_only=True)
    settings, knobs = payload["settings"], payload["knobs"]
    script = (REPO / trained_policy_record("shapes")["command"].removeprefix("bash ")).read_text()
    flags = {
        "--seed": settings["seed"],
        "--clone-episodes": settings["clone_episodes"],
        "--clone-steps": settings["clone_steps"],
        "--blueprints": " ".join(settings["blueprints"]),
        "--episodes": settings["episodes"],
        "--n-envs": settings["n_envs"],
        "--ppo.ent_coef": f"{knobs['ppo']['ent_coef']:g}",
        "--ppo.ent_coef_final": f"{knobs['ppo']['ent_coef_final']:g}",
        "--reward.static_baseline": str(knobs["reward"]["static_baseline"]).lower(),
        "--gates.keep_reading": knobs["gates"]["keep_reading"],  # the default since 2026-11-27 is not v23w's
    }
    if settings["slots"] is None:  # every slot, the default
        flags["--slots"] = None
    else:
        flags["--slots"] = " ".join(settings["slots"])
    for flag, value in flags.items():
        if value is None:
            assert flag not in script, flag
        else:
            assert f"{flag} {value}" in script, f"{flag} {value}"
    command = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    config = re.search(r"--config (\S+)", command)
    assert config is not None, "the recipe names its teacher's knobs"
    teacher = tomllib.loads((REPO / config.group(1)).read_text())["heuristic"]
    assert {k: knobs["heuristic"][k] for k in teacher} == teacher, "the teacher cloned had the file's knobs"
    assert settings["clone_teacher"] == "heuristic" and settings["clone_decisions"] == "all"
    assert settings["init_policy"] is None and "--init-policy" not in script
    seeds = {int(s) for s in payload["training_seeds"]}
    assert seeds == set(range(12000, 12029, 4)) | set(range(12032, 12038)), "its PPO seeds and cloned seeds"


def test_the_shapes_policy_is_the_one_its_record_s_eval_measured() -> None:
    """The eval the record names measured this very policy (the hash it recorded), so a redraw of
    the recipe shipped without a new eval fails here."""
    record = trained_policy_record("shapes")
    measured = json.loads((REPO / record["eval"]).read_text())["policy_sha256"]["policy:shapes"]
    assert policy_sha256(trained_policy_path("shapes")) == measured
    # an eval episode records the hash of the policy its controller loaded, from that one read
    assert PolicyController.from_checkpoint(trained_policy_path("shapes")).policy_sha256 == measured


def test_eval_refuses_the_shapes_policy_on_a_seed_it_trained_on(capsys) -> None:
    seed = min(trained_policy_record("shapes")["training_seeds"])
    argv = ["eval", "--task", "shapes", "--controllers", "heuristic", "policy:shapes", "--seeds", f"{seed}:{seed + 2}"]
    check_usage_error(capsys, argv, f"policy:shapes was trained on seed {seed}")


@pytest.mark.slow
def test_grow_runs_the_shapes_policy_on_the_real_task(workdir, tmp_path) -> None:
    """`esper grow --controller policy:shapes`: the learned controller's one-command equivalent of
    `esper heuristic`, on the task it was trained for (two epochs, to stay fast)."""
    run_dir = tmp_path / "grown"
    assert (
        main(["grow", "--controller", "policy:shapes", "--max-epochs", "2", "--quiet", "--run-dir", str(run_dir)]) == 0
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["controller"] == "policy:shapes" and summary["task"] == "shapes"
