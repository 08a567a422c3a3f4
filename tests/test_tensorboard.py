"""TensorBoard: `heuristic` and `ppo` runs write the named scalars, read back with TensorBoard's own reader."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_shapes_task
from esper.runs.common import rebuilt_tensorboard
from esper.scripts.cli import main
from esper.tolaria import TASKS

pytestmark = pytest.mark.slow


def read_board(run_dir: Path) -> EventAccumulator:
    board = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    board.Reload()
    return board


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


def test_a_heuristic_run_writes_host_curves_slots_lifecycle_and_config(tiny_shapes, workdir, tmp_path) -> None:
    run_dir = tmp_path / "run"
    assert main(["heuristic", "--episodes", "2", "--max-epochs", "5", "--run-dir", str(run_dir), "--quiet"]) == 0
    board = read_board(run_dir)
    scalars = set(board.Tags()["scalars"])
    for episode in ("episode_0000", "episode_0001"):
        for name in ("train_accuracy", "val_accuracy", "train_loss", "val_loss"):
            assert f"{episode}/host/{name}" in scalars
        assert {f"{episode}/slot_{s}/{k}" for s in ("early", "mid", "late") for k in ("alpha", "stage")} <= scalars
    curve = board.Scalars("episode_0000/host/val_accuracy")
    assert [e.step for e in curve] == [1, 2, 3, 4, 5]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    recorded = [e["val_accuracy"] for e in events if e["kind"] == "epoch" and e["episode"] == 0]
    assert [e.value for e in curve] == pytest.approx(recorded)
    summary = json.loads((run_dir / "summary.json").read_text())
    final = board.Scalars("host/final_test_accuracy")
    assert [e.step for e in final] == [0, 1]
    assert [e.value for e in final] == pytest.approx(summary["final_test_accuracy_per_episode"])
    assert "hyperparameters/text_summary" in board.Tags()["tensors"]
    if any(e["kind"] == "stage_change" for e in events):
        assert any(tag.startswith("lifecycle/episode_") for tag in board.Tags()["tensors"])


def test_a_ppo_run_writes_cleanrl_scalars_reward_parts_and_op_mix(tiny_shapes, workdir, tmp_path) -> None:
    run_dir = tmp_path / "run"
    argv = ["ppo", "--episodes", "4", "--n-envs", "2", "--max-epochs", "2", "--quiet", "--run-dir", str(run_dir)]
    assert main(argv) == 0
    board = read_board(run_dir)
    scalars = set(board.Tags()["scalars"])
    cleanrl = {
        "charts/episodic_return",
        "charts/SPS",
        "charts/learning_rate",
        "losses/policy_loss",
        "losses/value_loss",
        "losses/entropy",
        "losses/approx_kl",
        "losses/old_approx_kl",
        "losses/clipfrac",
        "losses/explained_variance",
    }
    assert cleanrl <= scalars
    assert {"rewards/accuracy", "rewards/parameter_cost", "charts/op_wait", "charts/op_germinate"} <= scalars
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    returns = board.Scalars("charts/episodic_return")
    assert [e.step for e in returns] == [r["global_step"] for r in rows]
    assert [e.value for e in returns] == pytest.approx([r["charts/episodic_return"] for r in rows])
    assert "episode_0003/host/val_accuracy" in scalars
    assert all(
        json.loads(line)["kind"] != "round_metrics" for line in (run_dir / "events.jsonl").read_text().splitlines()
    )


def steps_per_tag(board: EventAccumulator) -> dict[str, list[int]]:
    return {tag: [e.step for e in board.Scalars(tag)] for tag in board.Tags()["scalars"]}


def event_keys(run_dir: Path) -> list[tuple]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [(e["kind"], e["episode"], e["epoch"]) for e in map(json.loads, lines)]


@pytest.mark.slow
def test_a_ppo_run_killed_mid_round_resumes_without_writing_any_point_twice(tiny_shapes, workdir, tmp_path) -> None:
    """The killed round's episodes were in `events.jsonl` and TensorBoard twice, once from the
    interrupted try and once from the rerun (the warm start's episodes, numbered as the rounds'
    later ones, must survive the cut)."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    argv = ["ppo", "--episodes", "6", "--n-envs", "2", "--max-epochs", "2", "--quiet"]
    argv += ["--clone-episodes", "1", "--clone-steps", "5"]
    assert main([*argv, "--run-dir", str(whole)]) == 0
    assert main([*argv, "--run-dir", str(killed)]) == 0
    # A kill in round 3 after its episodes and row were written, before its checkpoint and summary:
    (killed / "checkpoints" / "round-0003.pt").unlink()
    (killed / "summary.json").unlink()
    assert main([*argv, "--resume", "last", "--run-dir", str(killed)]) == 0
    assert event_keys(killed) == event_keys(whole)
    assert ("epoch", 6, 1) in event_keys(killed), "the warm start's episode is kept"
    assert steps_per_tag(read_board(killed)) == steps_per_tag(read_board(whole))


@pytest.mark.slow
def test_a_heuristic_run_killed_mid_episode_resumes_without_writing_any_point_twice(
    tiny_shapes, workdir, tmp_path
) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    argv = ["heuristic", "--episodes", "3", "--max-epochs", "4", "--quiet"]
    assert main([*argv, "--run-dir", str(whole)]) == 0
    assert main([*argv, "--run-dir", str(killed)]) == 0
    for path in (killed / "episodes" / "episode-0002.json", killed / "summary.json"):
        path.unlink()  # a kill at the end of episode 2, before its record
    assert main([*argv, "--resume", "last", "--run-dir", str(killed)]) == 0
    assert event_keys(killed) == event_keys(whole)
    assert steps_per_tag(read_board(killed)) == steps_per_tag(read_board(whole))


def test_a_board_rebuilt_at_a_resume_keeps_the_run_s_wall_clock(tiny_shapes, workdir, tmp_path) -> None:
    """Each point carries its event's time, and a round's row the time its episodes had ended, so
    TensorBoard's wall-clock axis survives the rebuild instead of collapsing onto the resume."""
    run_dir = tmp_path / "run"
    argv = ["ppo", "--episodes", "4", "--n-envs", "2", "--max-epochs", "2", "--quiet", "--run-dir", str(run_dir)]
    assert main(argv) == 0
    rebuilt_tensorboard(run_dir, json.loads((run_dir / "config.json").read_text())).close()
    board = read_board(run_dir)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    epochs = [e["time"] for e in events if e["kind"] == "epoch" and e["episode"] == 0]
    curve = board.Scalars("episode_0000/host/val_accuracy")
    assert [p.wall_time for p in curve] == pytest.approx(epochs, abs=1e-3, rel=0)
    rounds = board.Scalars("charts/episodic_return")
    ends = [max(e["time"] for e in events if e["episode"] < episodes) for episodes in (2, 4)]
    assert [p.wall_time for p in rounds] == pytest.approx(ends, abs=1e-3, rel=0)
