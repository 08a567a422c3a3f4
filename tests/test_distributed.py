"""Policy data parallelism on CPU with the gloo backend and two ranks."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from esper.simic import morphogenetic_envs as menvs
from esper.simic.distributed import (
    attempt_prefix,
    init_distributed,
    merge_observations,
    shutdown_distributed,
)
from esper.simic.normalizer import RunningMeanStd
from esper.tolaria import EnvConfig

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round_on_rank(rank: int, world_size: int, port: int, out_dir: str) -> None:
    """Run in a spawned process: one PPO round of a tiny trainer, then report what this rank holds."""
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    import faulthandler

    faulthandler.enable()
    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import tiny_shapes_task

    ctx = init_distributed(torch.device("cpu"))
    try:
        task = tiny_shapes_task()
        config = menvs.TrainerConfig(episodes=4, n_envs=1, rng_seed=3, hidden=16)
        env_config = EnvConfig(task, torch.device("cpu"), 2, ("early", "mid", "late"), max_germinations=2)
        cpu = torch.device("cpu")
        envs, learner = menvs.build_trainer(config, env_config, task.load_data(None), [cpu], cpu, ctx=ctx)
        row = menvs.run_round(envs, learner)
        episodes = list(envs.episodes)
        flat = torch.cat([p.detach().reshape(-1) for p in learner.policy.parameters()])
        torch.save(
            {
                "params": flat,
                "obs_mean": learner.obs_norm.mean,
                "obs_count": learner.obs_norm.count,
                "episodes_done": learner.episodes_done,
                "start_episodes": episodes,
                "row": row,
            },
            Path(out_dir) / f"rank{rank}.pt",
        )
        shutdown_distributed()
    finally:
        shutdown_distributed(graceful=False)


@pytest.mark.slow
def test_two_gloo_ranks_hold_the_same_policy_after_an_update(tmp_path: Path) -> None:
    mp.spawn(one_round_on_rank, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert torch.equal(r0["params"], r1["params"])
    assert torch.equal(r0["obs_mean"], r1["obs_mean"]) and r0["obs_count"] == r1["obs_count"] == 4  # 2 ranks x 2 steps
    assert r0["episodes_done"] == r1["episodes_done"] == 2
    assert r0["start_episodes"] == [0] and r1["start_episodes"] == [1]  # distinct episodes, so distinct seeds
    assert r0["row"] == r1["row"]  # metrics are reduced over ranks


def test_merged_observation_statistics_equal_the_pooled_batch() -> None:
    from esper.simic.distributed import SINGLE_PROCESS

    data = torch.randn(10, 3, dtype=torch.float64)
    merged = RunningMeanStd(3)
    merged.merge(4, data[:4].mean(0), data[:4].var(0, unbiased=False))
    merge_observations(SINGLE_PROCESS, merged, data[4:])
    assert torch.allclose(merged.mean, data.mean(0)) and torch.allclose(merged.var, data.var(0, unbiased=False))


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
    reason="torchrun not installed",
)
def test_torchrun_two_ranks_then_single_process_resume(tmp_path: Path) -> None:
    """The documented command: rank 0 alone writes; the checkpoint has no `module.` prefix and
    resumes in a single process."""
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = ["--n-envs", "1", "--max-epochs", "1", "--device", "cpu", "--quiet"]
    result = subprocess.run(
        [
            torchrun,
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "esper.scripts.cli",
            "ppo",
            "--episodes",
            "4",
            *common,
            "--run-dir",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2] and rows[-1]["episodes"] == 4
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["round-0001.pt", "round-0002.pt"]
    checkpoint = torch.load(run_dir / "checkpoints" / "round-0002.pt", weights_only=True)
    assert not any(k.startswith("module.") for k in checkpoint["learner"]["policy"])
    assert len(checkpoint["learner"]["rng_ranks"]) == 2
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "esper.scripts.cli",
            "ppo",
            "--resume",
            str(run_dir / "checkpoints" / "round-0002.pt"),
            "--episodes",
            "5",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3] and rows[-1]["episodes"] == 5


CRASHING_RANK = """
import sys, torch
from esper.simic.distributed import init_distributed, shutdown_distributed
ctx = init_distributed(torch.device("cpu"))
if ctx.rank == 1:
    raise RuntimeError("rank 1 fails")
ctx.barrier()  # rank 0 would wait here forever if nothing ended the job
shutdown_distributed()
"""


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
    reason="torchrun not installed",
)
def test_a_crash_on_one_rank_ends_the_job_with_a_nonzero_exit(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    script = tmp_path / "crash.py"
    script.write_text(CRASHING_RANK)
    result = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node=2", str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert result.returncode != 0
    assert "rank 1 fails" in result.stderr


def test_each_launch_attempt_meets_under_its_own_store_prefix() -> None:
    """torchrun's shared store outlives a restart: the restarted group must not read the last
    attempt's keys (tests/test_elastic.py restarts through it, without any variable set)."""
    assert attempt_prefix({}) == "esper/attempt-0"
    assert attempt_prefix({"TORCHELASTIC_RESTART_COUNT": "2"}) == "esper/attempt-2"
