"""torchrun elastic: with `--max-restarts` and `ppo --resume last`, a rank killed with SIGKILL
mid-run makes torchrun restart every rank, which resume from the last checkpoint; the job
completes with the metrics of an uninterrupted run, row for row."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_cli_ppo import without_timing

TORCHRUN = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(TORCHRUN).exists(), reason="torchrun not installed"),
]
PPO = ["-m", "esper", "ppo", "--episodes", "8", "--n-envs", "1", "--max-epochs", "1", "--device", "cpu", "--quiet"]


def launch(run_dir: Path, restarts: int, fresh_store: bool = False) -> subprocess.Popen:
    command = [TORCHRUN, "--standalone", "--nproc-per-node=2", f"--max-restarts={restarts}"]
    command += [*PPO, "--resume", "last", "--run-dir", str(run_dir)]
    # The plain launch line: torchrun's shared store keeps the last attempt's keys, and each
    # attempt's group meets under its own prefix (esper.simic.distributed.attempt_prefix). With
    # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 each attempt has a fresh store of its own.
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"}
    env["OMP_NUM_THREADS"] = "1"
    if fresh_store:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            try:
                line = (Path("/proc") / str(child) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            found.append((child, line))
            todo.append(child)
    return found


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.mark.slow
@pytest.mark.parametrize("fresh_store", [False, True], ids=["shared store", "fresh store per attempt"])
def test_a_rank_killed_mid_run_is_restarted_and_the_job_completes_exactly(tmp_path: Path, fresh_store: bool) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    uninterrupted = launch(whole, restarts=0)
    _, err = uninterrupted.communicate(timeout=600)
    assert uninterrupted.returncode == 0, err[-2000:]

    job = launch(killed, restarts=2, fresh_store=fresh_store)
    deadline = time.monotonic() + 300
    while len(rows(killed)) < 2 and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job.poll() is None and len(rows(killed)) < 8, "killed mid-run"
    workers = [pid for pid, line in descendants(job.pid) if "esper" in line and "ppo" in line]
    assert len(workers) >= 2, "the ranks are running"
    os.kill(workers[-1], signal.SIGKILL)  # one rank dies without a word
    _, err = job.communicate(timeout=600)
    assert job.returncode == 0, err[-3000:]
    assert "exitcode: -9" in err, err[-3000:]  # torchrun saw the rank die, restarted the group, and it finished
    assert err.count("failed (exitcode") == 1, err[-3000:]  # the restarted group connected at its first try
    assert "esper: warning" not in err, err[-3000:]
    assert [without_timing(r) for r in rows(killed)] == [without_timing(r) for r in rows(whole)]
