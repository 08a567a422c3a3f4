"""SIGTERM and SIGINT: a `ppo` run stops once the round in flight is finished and checkpointed,
says how to resume, exits 143 (130); `--resume last` then finishes it exactly as an uninterrupted
run; a second signal stops at once without damaging what was written."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from esper.simic.checkpoint import read_checkpoint
from test_cli import subprocess_env
from test_cli_ppo import without_timing

pytestmark = pytest.mark.slow
PPO = [sys.executable, "-m", "esper", "ppo", "--n-envs", "1", "--max-epochs", "2", "--episodes", "4", "--quiet"]


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def start_then_signal(run_dir: Path, signals: list[signal.Signals]) -> subprocess.CompletedProcess:
    """Start a run, wait for its first round's row, then send `signals` half a second apart."""
    process = subprocess.Popen(
        [*PPO, "--run-dir", str(run_dir)],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not rows(run_dir) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    for sent in signals:
        process.send_signal(sent)
        time.sleep(0.5)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run."""
    run_dir = tmp_path_factory.mktemp("signals") / "whole"
    subprocess.run([*PPO, "--run-dir", str(run_dir)], env=subprocess_env(), check=True, capture_output=True)
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_finishes_the_round_then_resume_last_completes_it_exactly(
    whole: Path, tmp_path: Path, sent: signal.Signals, code: int
) -> None:
    split = tmp_path / "split"
    stopped = start_then_signal(split, [sent])
    assert stopped.returncode == code, stopped.stderr[-2000:]
    last_line = stopped.stderr.strip().splitlines()[-1]
    assert last_line.startswith("esper: stopped after round ") and f"--resume last --run-dir {split}" in last_line
    done = rows(split)
    assert 1 <= len(done) < 4  # the round in flight was finished, the run was not
    read_checkpoint(split / "checkpoints" / f"round-{done[-1]['round']:04d}.pt")  # what a resume needs
    resumed = subprocess.run(
        [*PPO, "--resume", "last", "--run-dir", str(split)], env=subprocess_env(), capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [without_timing(r) for r in rows(split)] == [without_timing(r) for r in rows(whole)]


@pytest.mark.slow
def test_a_second_signal_stops_at_once_and_leaves_the_checkpoints_whole(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    stopped = start_then_signal(run_dir, [signal.SIGTERM, signal.SIGTERM])
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert "send it again to stop at once" in stopped.stderr
    checkpoints = sorted((run_dir / "checkpoints").glob("round-*.pt"))
    assert checkpoints and all(read_checkpoint(path) for path in checkpoints)
    assert all(json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines())


@pytest.mark.slow
def test_kill_9_loses_at_most_the_round_in_flight_and_resume_last_completes_it(whole: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "killed"
    killed = start_then_signal(run_dir, [signal.SIGKILL])
    assert killed.returncode == -signal.SIGKILL
    done = rows(run_dir)
    checkpoints = (run_dir / "checkpoints").glob("round-*.pt")
    # A row is written before its round's checkpoint, so a kill between the two leaves the row
    # without the checkpoint (none at all after round 1): at most one round of work is lost.
    latest = max((int(p.stem.removeprefix("round-")) for p in checkpoints), default=0)
    assert latest >= done[-1]["round"] - 1 >= 0
    resumed = subprocess.run(
        [*PPO, "--resume", "last", "--run-dir", str(run_dir)], env=subprocess_env(), capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [without_timing(r) for r in rows(run_dir)] == [without_timing(r) for r in rows(whole)]
