"""Two GPUs: a tiny PPO job with envs spread over cuda:0 and cuda:1. Skipped with fewer GPUs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))
from conftest import tiny_shapes_task
from esper.scripts.cli import main
from esper.tolaria import TASKS

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def test_tiny_ppo_job_lands_envs_on_both_devices(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    run_dir = tmp_path / "run"
    argv = [
        "ppo",
        "--episodes",
        "4",
        "--n-envs",
        "2",
        "--max-epochs",
        "2",
        "--device",
        "cuda:0",
        "--devices",
        "cuda:0",
        "cuda:1",
        "--quiet",
        "--run-dir",
        str(run_dir),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "1 on cuda:0, 1 on cuda:1" in out
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[-1]["episodes"] == 4
