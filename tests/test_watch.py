"""`esper watch`: the live view, rendered to a string console; it follows a run as its files
grow, and Ctrl-C detaches cleanly."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_shapes_task
from esper.karn.live_view import render, sparkline, watch
from esper.karn.rundir import read_run
from esper.scripts.cli import main
from esper.tolaria import TASKS
from test_cli import check_usage_error


def text_of(run_dir: Path) -> str:
    console = Console(file=io.StringIO(), width=140, color_system=None)
    console.print(render(read_run(run_dir)))
    return console.file.getvalue()


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("watch") / "ppo"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(TASKS, "shapes", tiny_shapes_task())
        argv = ["ppo", "--episodes", "4", "--n-envs", "2", "--max-epochs", "3", "--quiet", "--run-dir", str(run_dir)]
        assert main(argv) == 0
    return run_dir


def test_sparkline_scales_between_min_and_max() -> None:
    assert sparkline([1.0, 2.0, 3.0]) == "▁▅█"
    assert sparkline([5.0, 5.0]) == "▁▁"
    assert sparkline([]) == ""
    assert len(sparkline(list(map(float, range(100))), width=10)) == 10


@pytest.mark.slow
def test_the_view_of_a_finished_ppo_run_has_envs_slots_and_the_round(ppo_run: Path) -> None:
    text = text_of(ppo_run)
    assert "ppo on shapes, 4 episode(s) done, finished" in text
    assert all(name in text for name in ("early", "mid", "late", "sel acc", "last action"))
    assert "PPO round 2 (4 episodes done)" in text and "return" in text and "op mix" in text


@pytest.mark.slow
def test_the_view_follows_a_run_as_its_files_grow(ppo_run: Path, tmp_path: Path) -> None:
    """A copy of the run written line by line: the view counts rounds as they land, and a
    half-written last line is skipped."""
    live = tmp_path / "live"
    live.mkdir()
    (live / "config.json").write_text((ppo_run / "config.json").read_text())
    assert "no epoch yet" in text_of(live)
    events = (ppo_run / "events.jsonl").read_text().splitlines(keepends=True)
    rows = (ppo_run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (live / "events.jsonl").write_text("".join(events[:5]) + events[5][:20])
    assert "running" in text_of(live) and "PPO round" not in text_of(live)
    (live / "events.jsonl").write_text("".join(events))
    (live / "metrics.jsonl").write_text(rows[0])
    assert "PPO round 1 (2 episodes done)" in text_of(live)
    (live / "metrics.jsonl").write_text("".join(rows))
    assert "PPO round 2 (4 episodes done)" in text_of(live)


@pytest.mark.slow
def test_ctrl_c_detaches_with_exit_code_0(ppo_run: Path) -> None:
    refreshes = []

    def sleep(seconds: float) -> None:
        refreshes.append(seconds)
        if len(refreshes) == 3:
            raise KeyboardInterrupt

    console = Console(file=io.StringIO(), width=140, color_system=None)
    assert watch(ppo_run, 0.5, console=console, sleep=sleep) == 0
    assert refreshes == [0.5, 0.5, 0.5]
    assert "detached" in console.file.getvalue()


def test_bad_run_directories_and_intervals_are_one_line(tmp_path: Path, capsys) -> None:
    check_usage_error(capsys, ["watch", str(tmp_path / "missing")], "is not a directory")
    check_usage_error(capsys, ["watch", str(tmp_path)], "is not an Esper run directory")
    (tmp_path / "config.json").write_text("{}")
    check_usage_error(capsys, ["watch", str(tmp_path), "--interval", "0"], "--interval must be > 0")
