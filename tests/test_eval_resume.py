"""`esper eval` saves each episode as it finishes: a signal stops it after the episodes running
(exit 143, one line), and `--resume last` runs only what is missing, to the same eval.json."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import esper.runs.eval_run as evaluate
from conftest import tiny_shapes_task
from esper.scripts.cli import main
from esper.tolaria import TASKS
from test_cli import check_usage_error

EVAL = ["eval", "--controllers", "static", "heuristic", "--seeds", "3:5", "--max-epochs", "2", "--workers", "0"]


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


def without_seconds(report: dict) -> dict:
    report = json.loads(json.dumps(report))
    for values in report["controllers"].values():
        values.pop("seconds")
    return {k: v for k, v in report.items() if k in ("seeds", "controllers", "paired", "diagnostics")}


@pytest.mark.slow
def test_a_signal_stops_eval_and_resume_last_finishes_it_to_the_same_report(
    tiny_shapes, workdir: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert main([*EVAL, "--run-dir", str(whole)]) == 0
    real = evaluate.episode_result
    calls = []

    def signalled_after_two(job):
        result = real(job)
        calls.append(job)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` would, while an episode runs
        return result

    monkeypatch.setattr(evaluate, "episode_result", signalled_after_two)
    capsys.readouterr()
    assert main([*EVAL, "--resume", "last", "--run-dir", str(stopped)]) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("esper: eval stopped with 2 episodes") and "--resume last" in err[-1]
    assert not (stopped / "eval.json").exists()
    assert len((stopped / "episodes.jsonl").read_text().splitlines()) == 2
    monkeypatch.setattr(evaluate, "episode_result", real)
    assert main([*EVAL, "--resume", "last", "--run-dir", str(stopped)]) == 0
    assert len((stopped / "episodes.jsonl").read_text().splitlines()) == 4  # only the missing two ran
    report = json.loads((stopped / "eval.json").read_text())
    assert without_seconds(report) == without_seconds(json.loads((whole / "eval.json").read_text()))


@pytest.mark.slow
def test_eval_resume_refuses_other_settings(tiny_shapes, workdir: Path, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main([*EVAL, "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    check_usage_error(
        capsys, [*EVAL, "--max-germinations", "2", "--resume", "last", "--run-dir", str(run_dir)], "other"
    )
    check_usage_error(capsys, [*EVAL, "--resume", "last"], "--resume last needs --run-dir")
