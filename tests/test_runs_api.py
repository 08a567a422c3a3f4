"""`esper.runs`: each command as a Python function taking the command's settings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import esper.runs
from conftest import tiny_shapes_task
from esper.kasmina.blueprints import Topology, blueprint_names
from esper.scripts.cli import main
from esper.tolaria import TASKS


def test_the_package_names_one_function_per_command() -> None:
    assert [f.__name__ for f in (esper.runs.grow, esper.runs.heuristic, esper.runs.ppo, esper.runs.evaluate)] == [
        "grow",
        "heuristic",
        "ppo",
        "evaluate",
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: esper.runs.grow(max_epoch=3), "esper.runs.grow(): unknown key 'max_epoch'; valid keys: task episodes"),
        (lambda: esper.runs.ppo(knobs={"ppo": {"bogus": 1}}), "unknown key 'ppo.bogus'; valid keys of [ppo]:"),
        (lambda: esper.runs.heuristic(knobs={"reward": {}}), "esper.runs.heuristic() knobs: unknown key 'reward'"),
        (lambda: esper.runs.evaluate(["static", "nonsense"], seeds="0:2"), "unknown controller 'nonsense'"),
        (lambda: esper.runs.grow(episodes=0), "--episodes must be >= 1"),
    ],
)
def test_bad_settings_raise_the_commands_one_line_and_write_nothing(call, message: str, workdir: Path) -> None:
    with pytest.raises(esper.runs.UsageError) as error:
        call()
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (workdir / "runs").exists()


def test_a_python_grow_equals_the_command_with_the_same_settings(workdir: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    knobs = {"heuristic": {"warmup_epochs": 1, "plateau_patience": 1}}
    summary = esper.runs.heuristic(max_epochs=4, seed=3, run_dir="runs/python", quiet=True, knobs=knobs)
    flags = ["--max-epochs", "4", "--seed", "3", "--quiet", "--run-dir", "runs/cli"]
    assert main(["heuristic", *flags, "--heuristic.warmup_epochs", "1", "--heuristic.plateau_patience", "1"]) == 0
    written = json.loads(Path("runs/python/summary.json").read_text())
    command = json.loads(Path("runs/cli/summary.json").read_text())
    assert summary == written
    assert written["final_test_accuracy"] == command["final_test_accuracy"]
    python_config, cli_config = (json.loads(Path(f"runs/{r}/config.json").read_text()) for r in ("python", "cli"))
    assert python_config["settings"] == cli_config["settings"] and python_config["knobs"] == cli_config["knobs"]
    assert python_config["command"] == cli_config["command"] == "heuristic"


@pytest.mark.slow
def test_the_docs_example_runs_as_printed(workdir: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    page = (Path(__file__).parents[1] / "docs" / "commands.md").read_text()
    block = page.split("<!-- example: runs from python -->")[1].split("```python")[1].split("```")[0]
    exec(compile(block, "docs/commands.md", "exec"), {})
    assert "test accuracy" in capsys.readouterr().out
    assert (workdir / "runs" / "from-python-heuristic" / "summary.json").is_file()


@pytest.mark.slow
def test_a_policy_trained_with_a_width_blueprint_holds_it_and_plays_in_eval(workdir: Path, monkeypatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    blueprints = ["conv_light", "widen_25"]
    summary = esper.runs.ppo(episodes=2, n_envs=2, max_epochs=3, blueprints=blueprints, run_dir="runs/w", quiet=True)
    assert summary["action_heads"]["blueprint"] == len(blueprint_names(Topology.CNN)) + 1  # the residual ones, widen_25
    assert "mid.blueprint_widen_25" in summary["observation_layout"]
    policy = f"policy:{summary['checkpoint']}"
    report = esper.runs.evaluate(
        ["static", policy], seeds="100:102", max_epochs=3, workers=0, run_dir="runs/e", quiet=True
    )
    assert set(report["controllers"]) == {"static", policy}


def test_a_deterministic_run_from_python_leaves_the_kernel_settings_as_it_found_them(
    workdir: Path, monkeypatch
) -> None:
    """`deterministic=True` turned torch's deterministic mode on for the rest of the caller's
    process: a notebook's later work ran (or refused) deterministic kernels it never asked for."""
    import torch

    def settings() -> tuple[bool, bool, bool, bool]:
        return (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
        )

    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # the run sets it; the test leaves it as found
    original = settings()
    try:
        torch.backends.cudnn.benchmark = True  # a caller's own settings, none of them the run's
        esper.runs.grow("static", deterministic=True, max_epochs=1, run_dir="runs/det", quiet=True)
        assert json.loads(Path("runs/det/config.json").read_text())["settings"]["deterministic"] is True
        assert settings() == (False, False, False, True)
        torch.use_deterministic_algorithms(True, warn_only=True)
        esper.runs.grow("static", deterministic=True, max_epochs=1, run_dir="runs/warn", quiet=True)
        assert settings() == (True, True, False, True)
    finally:
        torch.use_deterministic_algorithms(original[0], warn_only=original[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = original[2:]
