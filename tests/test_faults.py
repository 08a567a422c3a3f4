"""Disk and file faults: a full disk while checkpointing is one line and a non-zero exit, with
every earlier checkpoint and row intact; a row a kill cut short does not stop a resume."""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import esper.karn.files as files
from conftest import tiny_shapes_task
from esper.scripts.train import main
from esper.simic.checkpoint import read_checkpoint
from esper.tolaria import TASKS
from test_cli_ppo import TINY, rows, without_timing

pytestmark = pytest.mark.slow


@pytest.fixture
def tiny_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


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


def test_a_row_cut_short_by_a_kill_does_not_stop_the_resume(tiny_tasks, workdir: Path, tmp_path: Path) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main(["ppo", "--episodes", "6", *TINY, "--run-dir", str(whole)]) == 0
    assert main(["ppo", "--episodes", "4", *TINY, "--run-dir", str(killed)]) == 0
    with (killed / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(rows(whole)[2])[:40])  # round 3 was being written when the process died
    assert main(["ppo", "--episodes", "6", *TINY, "--resume", "last", "--run-dir", str(killed)]) == 0
    assert [without_timing(r) for r in rows(killed)] == [without_timing(r) for r in rows(whole)]
