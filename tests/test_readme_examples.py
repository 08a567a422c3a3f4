"""The Python examples of the README, docs/lifecycle.md and docs/commands.md run as printed
(on the tiny shapes task, from a folder holding a quick-start run)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_shapes_task
from esper.scripts.cli import main
from esper.tolaria import TASKS

ROOT = Path(__file__).parents[1]
EXAMPLES = {
    "build a model": "README.md",
    "run an episode": "docs/lifecycle.md",
    "load a run": "docs/commands.md",
    "load a grown network": "docs/commands.md",
    "train and evaluate a controller": "README.md",
}


def example(name: str) -> str:
    page = (ROOT / EXAMPLES[name]).read_text()
    return page.split(f"<!-- example: {name} -->")[1].split("```python")[1].split("```")[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_the_readme_example_runs(name: str, workdir: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    argv = ["heuristic", "--max-epochs", "16", "--quiet", "--run-dir", "runs/quickstart"]
    argv += ["--heuristic.warmup_epochs", "1", "--heuristic.plateau_patience", "1"]
    assert main(argv) == 0
    capsys.readouterr()
    exec(compile(example(name), f"{EXAMPLES[name]} ({name})", "exec"), {})
    assert capsys.readouterr().out.strip()
