"""Your own model and data: the docs' example task (docs/own-task.md) runs as printed, from a
module written outside the repository, into the same run directory as a built-in task's; and
every way of naming a task wrongly is one line with exit code 2, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from esper import load_grown
from esper.scripts.cli import main
from esper.tolaria import get_task
from esper.tolaria.tasks import user_task
from test_cli import check_usage_error

PAGE = (Path(__file__).parents[1] / "docs" / "own-task.md").read_text()


def example(name: str, language: str) -> str:
    return PAGE.split(f"<!-- example: {name} -->")[1].split(f"```{language}")[1].split("```")[0]


@pytest.fixture
def module_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder outside the repository holding the docs' `mymodule.py`, as the working directory."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "mymodule.py").write_text(example("own task module", "python"))
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the task's import adds the working directory
    user_task.cache_clear()
    sys.modules.pop("mymodule", None)
    yield folder
    user_task.cache_clear()
    sys.modules.pop("mymodule", None)


def command_lines() -> list[list[str]]:
    lines = [line.split() for line in example("own task command", "bash").strip().splitlines()]
    assert [line[:2] for line in lines] == [["esper", "grow"], ["esper", "report"]]
    return [line[1:] for line in lines]


@pytest.mark.slow
def test_the_docs_example_grows_a_user_cnn_on_user_data(module_folder: Path, capsys) -> None:
    grow, report = command_lines()
    assert main(grow) == 0
    run_dir = module_folder / "runs" / "quadrants"
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "config.json",
        "episodes",
        "events.jsonl",
        "grown",
        "summary.json",
        "tensorboard",
    ]  # what `esper grow` writes for a built-in task
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["task"] == "mymodule:make_task" and summary["final_test_accuracy"] > 40  # chance: 25
    assert main(report) == 0
    assert (run_dir / "report" / "report.html").is_file()
    grown = load_grown(run_dir / "grown" / "episode-0000.pt")
    data = get_task("mymodule:make_task").load_data(None)
    with torch.no_grad():
        correct = (grown(data.test_x).argmax(1) == data.test_y).float().mean().item() * 100
    assert round(correct, 2) == pytest.approx(summary["final_test_accuracy"], abs=0.01)
    assert type(grown.host).__name__ == "QuadrantCNN"


@pytest.mark.slow
def test_the_console_script_finds_the_module_in_its_working_folder(module_folder: Path) -> None:
    """`esper` is a console script, whose sys.path holds its own folder, not the one run from."""
    esper = Path(sys.executable).parent / "esper"
    argv = [str(esper), "heuristic", "--task", "mymodule:make_task", "--max-epochs", "2", "--quiet"]
    done = subprocess.run([*argv, "--run-dir", "r"], cwd=module_folder, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((module_folder / "r" / "config.json").read_text())["settings"]["task"] == "mymodule:make_task"


BAD_MODULES = {
    "no such module": ("", "nomodule:make_task", "cannot import 'nomodule'"),
    "no such function": ("def other():\n    return 1\n", "badtask:make_task", "has no function 'make_task'"),
    "not a TaskSpec": ("def make_task():\n    return 42\n", "badtask:make_task", "returned int, not an esper TaskSpec"),
    "not a function name": ("", "badtask:", "package.module:function"),
}


@pytest.mark.parametrize("case", sorted(BAD_MODULES))
def test_a_bad_task_name_is_one_line(case: str, module_folder: Path, capsys) -> None:
    source, name, fragment = BAD_MODULES[case]
    (module_folder / "badtask.py").write_text(source)
    sys.modules.pop("badtask", None)
    check_usage_error(capsys, ["grow", "--task", name, "--run-dir", "r"], fragment)
    assert not (module_folder / "r").exists()


def test_a_host_whose_slots_disagree_with_the_spec_is_refused(module_folder: Path, capsys) -> None:
    source = example("own task module", "python").replace("n_slots=2", "n_slots=3")
    (module_folder / "wrongslots.py").write_text(source)
    check_usage_error(capsys, ["grow", "--task", "wrongslots:make_task", "--run-dir", "r"], "declares 2 slots")
    assert not (module_folder / "r").exists()


def test_a_width_seed_on_a_plain_host_is_one_line(module_folder: Path, capsys) -> None:
    argv = ["heuristic", "--task", "mymodule:make_task", "--blueprints", "widen_25", "--run-dir", "r"]
    err = check_usage_error(capsys, argv, "widen_25")
    assert "early" in err or "slot" in err
    assert not (module_folder / "r").exists()


@pytest.mark.slow
def test_eval_workers_import_the_task_by_its_name(module_folder: Path, capsys) -> None:
    """An eval's worker processes are spawned fresh: each finds the module again by the task's name."""
    argv = ["eval", "--task", "mymodule:make_task", "--controllers", "static", "heuristic", "--seeds", "0:2"]
    assert main([*argv, "--max-epochs", "2", "--workers", "2", "--run-dir", "ev"]) == 0
    report = json.loads((module_folder / "ev" / "eval.json").read_text())
    assert report["task"] == "mymodule:make_task" and len(report["controllers"]["heuristic"]["test_accuracy"]) == 2


ONE_SHAPE = """

def one_shape(width: int) -> QuadrantCNN:
    if width != 8:
        raise ValueError(f"this host has one shape, width 8; not {width}")
    return QuadrantCNN(width)
"""


@pytest.fixture
def one_shape_task(module_folder: Path) -> str:
    """The docs' task with a host factory that refuses every width but its own (a grown shape)."""
    source = example("own task module", "python").replace("make_host=QuadrantCNN", "make_host=one_shape")
    (module_folder / "oneshape.py").write_text(source + ONE_SHAPE)
    sys.modules.pop("oneshape", None)
    yield "oneshape:make_task"
    sys.modules.pop("oneshape", None)


@pytest.mark.parametrize(
    "argv",
    [
        ["grow", "--controller", "static"],
        ["heuristic"],
        ["eval", "--controllers", "static", "--seeds", "0:1", "--workers", "0"],
        ["ppo", "--episodes", "1", "--n-envs", "1"],
    ],
    ids=["grow", "heuristic", "eval", "ppo"],
)
def test_a_width_the_host_factory_refuses_is_one_line(argv: list[str], one_shape_task: str, capsys) -> None:
    """It raised inside the first episode, a traceback after the run directory was written."""
    argv = [*argv, "--task", one_shape_task, "--host.width", "9", "--max-epochs", "1", "--run-dir", "r"]
    check_usage_error(capsys, argv, "--task oneshape:make_task", "width 9", "one shape")
    assert not Path("r").exists()


def test_matched_on_a_host_that_cannot_be_sized_is_one_line_and_keeps_the_episodes(one_shape_task: str, capsys) -> None:
    """`matched` sizes the host by width after the growing controllers ran: a failure found while
    the run ran (exit code 1), one line, and their episodes stay."""
    controllers = ["schedule:early=conv_light@0", "matched"]
    argv = ["eval", "--task", one_shape_task, "--controllers", *controllers, "--seeds", "0:1", "--max-epochs", "1"]
    assert main([*argv, "--workers", "0", "--quiet", "--run-dir", "ev"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "cannot be sized by width" in err and "1 episodes run are saved" in err
    rows = [json.loads(line) for line in Path("ev", "episodes.jsonl").read_text().splitlines()]
    assert [r["controller"] for r in rows] == ["schedule:early=conv_light@0"]


def test_a_grower_on_a_host_of_one_shape_is_reported_without_a_nearest_width(one_shape_task: str, capsys) -> None:
    """The nearest static width of a grower is found by building the host at other widths: a task
    that refuses them still gets its table and eval.json, without that column."""
    grower = "schedule:early=conv_light@0"
    argv = ["eval", "--task", one_shape_task, "--controllers", "static", grower, "--seeds", "0:1", "--max-epochs", "1"]
    assert main([*argv, "--workers", "0", "--quiet", "--run-dir", "ev"]) == 0
    report = json.loads(Path("ev", "eval.json").read_text())
    assert report["nearest_static_width"] == {} and len(report["controllers"][grower]["test_accuracy"]) == 1
