"""How PPO training scales: host-epochs per second with 1, 2, 4 and 8 envs on one device, and the
policy-DDP efficiency of 2 ranks against 1 (gloo on CPU, NCCL when `--device cuda`).

- envs: every env trains its host one epoch on the shared batches (`MorphogeneticEnvs.train_epoch`
  phase, all envs WAITing, so the work per epoch is the bare host's); the figure is host-epochs
  per second.
- DDP: `--rounds` PPO rounds of `--ddp-envs` envs per rank, each rank in its own process with one
  thread, timed between barriers; efficiency = throughput(2 ranks) / (2 x throughput(1 rank)).
  On a machine with fewer free cores than ranks x threads this measures contention, not DDP.
  With one GPU the 2-rank figure is skipped (NCCL needs a device per rank).
- on CUDA, `gpu_busy`: the fraction of one epoch's wall time that the GPU runs kernels, and the
  kernel launches per env-epoch, with 1 and 4 envs (under the profiler, so a little low).

Prints one JSON object. Usage: python benchmarks/scaling.py [--device cpu] [--epochs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

from esper.leyline import Decision
from esper.scripts.common import torch_build
from esper.simic import morphogenetic_envs as menvs
from esper.simic.distributed import SINGLE_PROCESS, init_distributed, shutdown_distributed
from esper.tolaria import EnvConfig, get_task


def make_trainer(n_envs: int, device: torch.device, max_epochs: int, ctx=SINGLE_PROCESS, rng_seed: int = 0):
    task = get_task("shapes")
    slots = task.slot_names
    config = menvs.TrainerConfig(episodes=10**6, n_envs=n_envs, rng_seed=rng_seed)
    env_config = EnvConfig(task, device, max_epochs, slots, max_germinations=6)
    return menvs.build_trainer(config, env_config, task.load_data(None), [device], device, ctx=ctx)


def host_epochs_per_second(n_envs: int, device: torch.device, epochs: int) -> float:
    envs, _ = make_trainer(n_envs, device, max_epochs=epochs + 1)
    envs.begin_round()
    ids = list(range(n_envs))
    envs.train_epoch(ids, [Decision.wait()] * n_envs)  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(epochs):
        envs.train_epoch(ids, [Decision.wait()] * n_envs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return n_envs * epochs / (time.perf_counter() - start)


def gpu_busy_fraction(n_envs: int, device: torch.device) -> dict[str, float]:
    """Kernel time / wall time over one timed epoch of `n_envs` envs, under the profiler.

    Why: host-epochs per second alone cannot say whether a GPU is saturated or idle between
    launches; the fraction of wall time its kernels run (and the launches per env-epoch) can.
    """
    from torch.profiler import ProfilerActivity, profile

    envs, _ = make_trainer(n_envs, device, max_epochs=3)
    envs.begin_round()
    ids = list(range(n_envs))
    envs.train_epoch(ids, [Decision.wait()] * n_envs)  # warm-up
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        envs.train_epoch(ids, [Decision.wait()] * n_envs)
        torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
    events = prof.key_averages()
    kernel_seconds = sum(e.self_device_time_total for e in events) / 1e6
    launches = sum(e.count for e in events if e.key.startswith("cudaLaunchKernel"))
    return {"busy_fraction": round(kernel_seconds / wall, 3), "kernel_launches_per_env_epoch": launches // n_envs}


def ddp_worker(rank: int, world_size: int, port: int, rounds: int, n_envs: int, device: str, out: str) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    dev = torch.device(device if device == "cpu" else f"cuda:{rank}")
    ctx = init_distributed(dev)
    try:
        envs, learner = make_trainer(n_envs, dev, max_epochs=2, ctx=ctx)
        menvs.run_round(envs, learner)  # warm-up
        ctx.barrier()
        start = time.perf_counter()
        steps_before = learner.global_step
        for _ in range(rounds):
            menvs.run_round(envs, learner)
        ctx.barrier()
        seconds = time.perf_counter() - start
        if rank == 0:
            Path(out).write_text(json.dumps({"steps": learner.global_step - steps_before, "seconds": seconds}))
        shutdown_distributed()
    finally:
        shutdown_distributed(graceful=False)


def ddp_throughput(world_size: int, rounds: int, n_envs: int, device: str) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.json")
        if world_size == 1:
            ddp_worker(0, 1, port, rounds, n_envs, device, out)
        else:
            mp.spawn(ddp_worker, args=(world_size, port, rounds, n_envs, device, out), nprocs=world_size, join=True)
        result = json.loads(Path(out).read_text())
    return result["steps"] / result["seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=3, help="timed host epochs per env count")
    parser.add_argument("--rounds", type=int, default=3, help="timed PPO rounds per DDP configuration")
    parser.add_argument("--ddp-envs", type=int, default=2, help="envs per rank in the DDP measurement")
    args = parser.parse_args()
    device = torch.device(args.device)
    envs = {str(n): round(host_epochs_per_second(n, device, args.epochs), 3) for n in (1, 2, 4, 8)}
    threads = torch.get_num_threads()
    one = ddp_throughput(1, args.rounds, args.ddp_envs, args.device)
    torch.set_num_threads(threads)
    figures = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "host_epochs_per_second": envs,
        "ddp_steps_per_second": {"1": round(one, 3)},
        "cpu_count": os.cpu_count(),
        **torch_build(),
    }
    if device.type == "cuda":
        figures["gpu_busy"] = {str(n): gpu_busy_fraction(n, device) for n in (1, 4)}
    # NCCL refuses two ranks on one GPU, so the 2-rank figure needs a second device.
    if device.type == "cuda" and torch.cuda.device_count() < 2:
        figures["ddp_efficiency"] = None
        figures["ddp_skipped"] = f"needs 2 CUDA devices, found {torch.cuda.device_count()}"
    else:
        two = ddp_throughput(2, args.rounds, args.ddp_envs, args.device)
        figures["ddp_steps_per_second"]["2"] = round(two, 3)
        figures["ddp_efficiency"] = round(two / (2 * one), 3)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
