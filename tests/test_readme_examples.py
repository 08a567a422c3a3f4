"""The README's Python examples run as printed (on the tiny shapes task, from a folder holding a
quick-start run)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_shapes_task
from esper.scripts.cli import main
from esper.tolaria import TASKS

README = (Path(__file__).parents[1] / "README.md").read_text()
EXAMPLES = (
    "build a model",
    "run an episode",
    "load a run",
    "load a grown network",
    "train and evaluate a controller",
)


def example(name: str) -> str:
    return README.split(f"<!-- example: {name} -->")[1].split("```python")[1].split("```")[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_the_readme_example_runs(name: str, workdir: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    argv = ["heuristic", "--max-epochs", "16", "--quiet", "--run-dir", "runs/quickstart"]
    argv += ["--heuristic.warmup_epochs", "1", "--heuristic.plateau_patience", "1"]
    assert main(argv) == 0
    capsys.readouterr()
    exec(compile(example(name), f"README.md ({name})", "exec"), {})
    assert capsys.readouterr().out.strip()
