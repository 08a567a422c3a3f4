"""`--resume last` (or a run directory): the latest complete checkpoint, a fresh start where there
is none, and a damaged latest checkpoint set aside for the one before it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_shapes_task
from esper.scripts.cli import main
from esper.tolaria import TASKS
from test_cli import check_usage_error
from test_cli_ppo import TINY, rows, without_timing


@pytest.fixture
def tiny_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


@pytest.mark.slow
def test_resume_last_starts_fresh_then_continues_exactly(tiny_tasks, workdir: Path, tmp_path: Path) -> None:
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(["ppo", "--episodes", "6", *TINY, "--run-dir", str(whole)]) == 0
    same_command = ["ppo", *TINY, "--resume", "last", "--run-dir", str(split)]
    assert main([*same_command, "--episodes", "4"]) == 0  # no checkpoint yet: a fresh run
    assert main([*same_command, "--episodes", "6"]) == 0  # the latest checkpoint (round 2)
    assert [without_timing(r) for r in rows(split)] == [without_timing(r) for r in rows(whole)]


def test_resume_last_on_a_finished_run_does_nothing_and_succeeds(
    tiny_tasks, workdir: Path, tmp_path: Path, capsys
) -> None:
    """The same command line repeated after it finished (a scheduler's retry) was exit code 2."""
    run_dir = tmp_path / "run"
    same_command = ["ppo", "--episodes", "4", *TINY, "--resume", "last", "--run-dir", str(run_dir)]
    assert main(same_command) == 0
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(same_command) == 0
    assert f"esper: {run_dir} has finished: 4 of 4 episodes; nothing to do" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").unlink()  # killed after its last checkpoint, before its summary
    assert main(same_command) == 0  # was exit code 2, "--episodes 4 is already reached"
    written = json.loads((run_dir / "summary.json").read_text())
    assert {k: written[k] for k in ("episodes", "rounds", "final_round", "checkpoint")} == {
        k: summary[k] for k in ("episodes", "rounds", "final_round", "checkpoint")
    }
    assert (run_dir / "metrics.jsonl").read_bytes() == before[run_dir / "metrics.jsonl"]
    capsys.readouterr()
    check_usage_error(capsys, ["ppo", "--resume", summary["checkpoint"], "--episodes", "4"], "already reached")
    (run_dir / "summary.json").unlink()
    (run_dir / "metrics.jsonl").unlink()  # was a KeyError's traceback
    check_usage_error(capsys, same_command, "has no rows: the summary of the run is written from them")
    assert not (run_dir / "summary.json").exists()


@pytest.mark.slow
def test_a_run_directory_given_to_resume_means_its_latest_checkpoint(tiny_tasks, workdir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert main(["ppo", "--episodes", "4", *TINY, "--save-every", "1", "--run-dir", str(run_dir)]) == 0
    assert main(["ppo", "--resume", str(run_dir), "--episodes", "6", "--quiet"]) == 0
    assert [r["round"] for r in rows(run_dir)] == [1, 2, 3]


@pytest.mark.slow
def test_a_damaged_latest_checkpoint_is_set_aside_with_a_warning(
    tiny_tasks, workdir: Path, tmp_path: Path, capsys
) -> None:
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(["ppo", "--episodes", "6", *TINY, "--run-dir", str(whole)]) == 0
    assert main(["ppo", "--episodes", "4", *TINY, "--run-dir", str(split)]) == 0
    latest = split / "checkpoints" / "round-0002.pt"
    latest.write_bytes(latest.read_bytes()[:100])  # a kill mid-write
    capsys.readouterr()
    assert main(["ppo", *TINY, "--resume", "last", "--run-dir", str(split), "--episodes", "6"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "round-0002.pt" in err and "resuming from the checkpoint before it" in err
    assert (split / "checkpoints" / "round-0002.pt.corrupt").exists()  # kept, not lost
    assert [without_timing(r) for r in rows(split)] == [without_timing(r) for r in rows(whole)]


def test_with_every_checkpoint_damaged_the_warning_says_the_run_starts_afresh(
    tiny_tasks, workdir: Path, tmp_path: Path, capsys
) -> None:
    """It said "resuming from the checkpoint before it" where there was none."""
    run_dir = tmp_path / "run"
    assert main(["ppo", "--episodes", "2", *TINY, "--run-dir", str(run_dir)]) == 0
    (run_dir / "summary.json").unlink()  # killed before its summary
    (only,) = (run_dir / "checkpoints").glob("round-*.pt")
    only.write_bytes(only.read_bytes()[:100])
    capsys.readouterr()
    assert main(["ppo", *TINY, "--resume", "last", "--run-dir", str(run_dir), "--episodes", "2"]) == 0
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert only.name in warning and "no complete checkpoint is left, so the run starts afresh" in warning
    assert "the checkpoint before it" not in warning
    assert only.with_name(only.name + ".corrupt").exists()


def test_a_fresh_start_in_place_drops_the_telemetry_of_a_start_that_saved_nothing(
    tiny_tasks, workdir: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"round": 1, "stale": true}\n')
    (run_dir / "events.jsonl").write_text('{"kind": "epoch", "stale": true}\n')
    assert main(["ppo", "--episodes", "2", *TINY, "--resume", "last", "--run-dir", str(run_dir)]) == 0
    assert all("stale" not in r for r in rows(run_dir))
    assert "stale" not in (run_dir / "events.jsonl").read_text()


def test_resume_last_needs_a_run_directory(workdir: Path, capsys) -> None:
    check_usage_error(capsys, ["ppo", "--resume", "last"], "--resume last needs --run-dir")


@pytest.mark.parametrize(
    ("files", "named"),
    [
        # a finished `heuristic` run: its config records no PPO settings
        (
            {"config.json": '{"settings": {"controller": "heuristic"}, "knobs": {}}', "events.jsonl": "{}\n"},
            "config.json",
        ),
        ({"summary.json": "{}", "events.jsonl": "{}\n", "config.json": "{}"}, "summary.json"),
        ({"eval.json": "{}", "config.json": "{}"}, "eval.json"),
        # the owner named: what config.json records, or the command line of an older record
        ({"config.json": '{"command": "heuristic", "settings": {}}', "events.jsonl": "{}\n"}, "`esper heuristic` run"),
        ({"config.json": '{"command_line": ["esper", "grow"], "settings": {}}'}, "`esper grow` run"),
        ({"eval.json": "{}", "config.json": "{}"}, "`esper eval` run"),
    ],
)
def test_resume_last_never_restarts_over_another_run(
    tiny_tasks, workdir: Path, tmp_path: Path, capsys, files: dict[str, str], named: str
) -> None:
    """No checkpoint used to mean "start fresh in place", whoever's folder it was: a finished
    heuristic run lost its config, summary and 40 epochs of events to a new PPO run."""
    run_dir = tmp_path / "other"
    run_dir.mkdir()
    for name, text in files.items():
        (run_dir / name).write_text(text)
    argv = ["ppo", "--episodes", "2", *TINY, "--resume", "last", "--run-dir", str(run_dir)]
    check_usage_error(capsys, argv, "holds no ppo checkpoint to continue", named, "new --run-dir")
    assert {p.name: p.read_text() for p in run_dir.iterdir()} == files
