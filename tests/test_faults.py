"""Disk and file faults: a full disk while checkpointing is one line and a non-zero exit, with
every earlier checkpoint and row intact; a row a kill cut short does not stop a resume."""

from __future__ import annotations

import errno
import json
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import esper.karn.files as files
from conftest import tiny_shapes_task
from esper.scripts.cli import main
from esper.simic.checkpoint import read_checkpoint
from esper.tolaria import TASKS, MorphogeneticEnv
from test_cli_ppo import TINY, rows, without_timing

pytestmark = pytest.mark.slow


@pytest.fixture
def tiny_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


@pytest.mark.slow
def test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_what_was_written(
    tiny_tasks, workdir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    run_dir = tmp_path / "run"
    real_write = files.write_atomic

    def full_at_round_2(path: Path, write) -> None:
        if path.name == "round-0002.pt":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_write(path, write)

    monkeypatch.setattr(files, "write_atomic", full_at_round_2)
    assert main(["ppo", "--episodes", "6", *TINY, "--run-dir", str(run_dir)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("esper: error: No space left on device") and "round-0002.pt" in err[0]
    read_checkpoint(run_dir / "checkpoints" / "round-0001.pt")
    assert not (run_dir / "checkpoints" / "round-0002.pt").exists()
    assert not list((run_dir / "checkpoints").glob(".*.tmp")), "no temporary file left behind"
    assert [r["round"] for r in rows(run_dir)] == [1, 2]  # the row of the round comes before its checkpoint
    monkeypatch.setattr(files, "write_atomic", real_write)
    assert main(["ppo", "--episodes", "6", *TINY, "--resume", "last", "--run-dir", str(run_dir)]) == 0
    assert [r["round"] for r in rows(run_dir)] == [1, 2, 3]


@pytest.mark.slow
def test_a_row_cut_short_by_a_kill_does_not_stop_the_resume(tiny_tasks, workdir: Path, tmp_path: Path) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main(["ppo", "--episodes", "6", *TINY, "--run-dir", str(whole)]) == 0
    assert main(["ppo", "--episodes", "4", *TINY, "--run-dir", str(killed)]) == 0
    with (killed / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(rows(whole)[2])[:40])  # round 3 was being written when the process died
    assert main(["ppo", "--episodes", "6", *TINY, "--resume", "last", "--run-dir", str(killed)]) == 0
    assert [without_timing(r) for r in rows(killed)] == [without_timing(r) for r in rows(whole)]


def inject(monkeypatch, episode: int, epoch: int, fault) -> None:
    """Run `fault(env)` after one training batch of the env playing `episode`, in `epoch`."""
    real = MorphogeneticEnv.train_batch

    def train_batch(self, x, y) -> None:
        real(self, x, y)
        if self.clock.episode == episode and self.clock.epoch == epoch:
            fault(self)

    monkeypatch.setattr(MorphogeneticEnv, "train_batch", train_batch)


@pytest.mark.slow
def test_nan_in_one_env_mid_round_is_that_env_s_panic_and_the_run_completes(
    tiny_tasks, workdir: Path, tmp_path: Path, monkeypatch
) -> None:
    def poison(env) -> None:
        with torch.no_grad():
            next(env.model.host.parameters()).fill_(float("nan"))

    inject(monkeypatch, episode=1, epoch=2, fault=poison)
    run_dir = tmp_path / "run"
    assert (
        main(["ppo", "--episodes", "4", "--n-envs", "2", "--max-epochs", "3", "--quiet", "--run-dir", str(run_dir)])
        == 0
    )
    metrics = rows(run_dir)
    assert metrics[0]["charts/panics"] == 1 and metrics[1]["charts/panics"] == 0
    assert all(math.isfinite(v) for row in metrics for v in row.values())
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["episode"] for e in events if e["kind"] == "governor_rollback"] == [1]
    assert [e["epoch"] for e in events if e["kind"] == "epoch" and e["episode"] == 0] == [1, 2, 3]  # the other env


def test_an_exception_in_one_env_stops_the_run_in_one_line_with_its_checkpoints_whole(
    tiny_tasks, workdir: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    def fail(env) -> None:
        raise RuntimeError("injected\nsecond line")

    inject(monkeypatch, episode=3, epoch=2, fault=fail)
    run_dir = tmp_path / "run"
    argv = ["ppo", "--episodes", "6", "--n-envs", "2", "--max-epochs", "3", "--quiet", "--run-dir", str(run_dir)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "esper: error: an env failed (episode 3, epoch 2): RuntimeError: injected; "
        "the checkpoints written so far are intact (--resume last)"
    ]
    read_checkpoint(run_dir / "checkpoints" / "round-0001.pt")
    assert [r["round"] for r in rows(run_dir)] == [1]
