"""Weights & Biases is optional: `--track` logs PPO rows and episode ends, tested offline."""

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

TINY_PPO = ["ppo", "--episodes", "4", "--n-envs", "2", "--max-epochs", "2", "--quiet"]


def test_a_project_without_track_is_refused(tmp_path: Path, capsys) -> None:
    check_usage_error(
        capsys, ["heuristic", "--wandb-project", "x", "--run-dir", str(tmp_path / "r")], "without --track"
    )
    assert not (tmp_path / "r").exists()


def test_track_without_wandb_installed_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now raises ImportError
    check_usage_error(capsys, [*TINY_PPO, "--track", "--run-dir", str(tmp_path / "r")], "pip install 'esper[wandb]'")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_track_logs_the_rounds_offline(tmp_path: Path, workdir: Path, monkeypatch) -> None:
    """A real offline W&B run; what it is given is recorded on the way through `Run.log`."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logged: list[tuple[dict, int]] = []
    real_log = wandb.sdk.wandb_run.Run.log

    def recording_log(self, data, step=None, **kwargs):
        logged.append((dict(data), step))
        return real_log(self, data, step=step, **kwargs)

    monkeypatch.setattr(wandb.sdk.wandb_run.Run, "log", recording_log)
    run_dir = tmp_path / "run"
    assert main([*TINY_PPO, "--track", "--wandb-project", "esper-test", "--run-dir", str(run_dir)]) == 0
    (offline,) = list((run_dir / "wandb").glob("offline-run-*"))
    assert next(offline.glob("run-*.wandb")).stat().st_size > 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [step for _, step in logged] == [row["global_step"] for row in rows]
    for (data, _), row in zip(logged, rows, strict=True):
        assert data["charts/episodic_return"] == row["charts/episodic_return"]
        assert "losses/old_approx_kl" in data and "round" not in data
