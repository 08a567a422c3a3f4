"""How PPO training scales on one device: host-epochs per second as envs are added, how busy the
GPU is, PPO env-steps per second, and (`--ddp`) the policy-DDP efficiency of 2 ranks against 1.

- envs: every env trains its host one epoch on the shared batches (`MorphogeneticEnvs.train_epoch`
  phase, all envs WAITing, so the work per epoch is the bare host's, its measurement included);
  the figure is host-epochs per second, for each path: `graphs` (CUDA graphs of the training step
  and the measurement, `esper.tolaria.graphs`) and `eager` (every kernel launched from Python).
  On the CPU the two are one code path, so only `eager` is measured there. Beside each
  rate, `phases` splits a timed epoch's wall time: `feed` until every env's training is queued,
  `end` from there to the last env's signals (the measurements, their reads and the lifecycle).
- gpu_busy (CUDA): over one timed epoch under the profiler, the fraction of wall time at least
  one kernel runs (the union of kernel intervals), the kernel time summed over streams per wall
  second (above 1 when streams overlap), and the CPU-side launches (kernels and graphs) per env-epoch.
- ppo: `--ppo-rounds` PPO rounds of `--ppo-envs` envs, episodes of `--ppo-epochs` host epochs
  (the lifecycle, re-captures and policy update included), timed after one warm-up round;
  env-steps per second for each path.
- DDP (`--ddp`): `--rounds` PPO rounds of `--ddp-envs` envs per rank, each rank in its own process
  with one thread, timed between barriers; efficiency = throughput(2 ranks) / (2 x throughput(1
  rank)). On a machine with fewer free cores than ranks x threads this measures contention, not
  DDP. With one GPU the 2-rank figure is skipped (NCCL needs a device per rank).

Prints one JSON object (and writes it to `--out`). Usage: python benchmarks/scaling.py
[--device cuda] [--envs 1,2,4,8,16,32] [--epochs 3] [--ddp]
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
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.multiprocessing as mp

from esper.leyline import Decision
from esper.runs.common import torch_build
from esper.simic import morphogenetic_envs as menvs
from esper.simic.distributed import SINGLE_PROCESS, init_distributed, shutdown_distributed
from esper.tolaria import EnvConfig, get_task

PATHS = ("graphs", "eager")


def make_trainer(
    n_envs: int, device: torch.device, max_epochs: int, ctx=SINGLE_PROCESS, rng_seed: int = 0, path: str = "graphs"
):
    task = get_task("shapes")
    slots = task.slot_names
    config = menvs.TrainerConfig(episodes=10**6, n_envs=n_envs, rng_seed=rng_seed)
    env_config = EnvConfig(task, device, max_epochs, slots, max_germinations=6, cuda_graphs=path != "eager")
    return menvs.build_trainer(config, env_config, task.load_data(None), [device], device, ctx=ctx)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def warmed_up(n_envs: int, device: torch.device, path: str, epochs_left: int):
    """`n_envs` envs two epochs into an episode with `epochs_left` more to go: the first epoch
    runs eagerly and captures the graphs, the second replays them."""
    envs, _ = make_trainer(n_envs, device, max_epochs=epochs_left + 2, path=path)
    envs.begin_round()
    ids = list(range(n_envs))
    for _ in range(2):
        envs.train_epoch(ids, [Decision.wait()] * n_envs)
    synchronize(device)
    return envs, ids


def host_epochs_per_second(n_envs: int, device: torch.device, epochs: int, path: str) -> tuple[float, dict]:
    """Timed after two warm-up epochs, and the wall time of an epoch split into its phases: the
    feed (until the first env's measurement is launched, which follows every env's last batch)
    and the end (the measurements, their reads and the lifecycle, to the last env's signals)."""
    envs, ids = warmed_up(n_envs, device, path, epochs_left=epochs)
    first = envs.envs[0]
    launch, fed = first.launch_measurement, []

    def timed_launch() -> None:
        fed.append(time.perf_counter())
        launch()

    first.launch_measurement = timed_launch
    starts, ends = [], []
    for _ in range(epochs):
        starts.append(time.perf_counter())
        envs.train_epoch(ids, [Decision.wait()] * n_envs)
        ends.append(time.perf_counter())
    synchronize(device)
    rate = n_envs * epochs / (time.perf_counter() - starts[0])
    phases = {
        "feed_seconds_per_epoch": round(sum(f - s for s, f in zip(starts, fed, strict=True)) / epochs, 4),
        "end_seconds_per_epoch": round(sum(e - f for f, e in zip(fed, ends, strict=True)) / epochs, 4),
    }
    return rate, phases


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by (start, end) intervals, overlaps counted once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def gpu_busy(n_envs: int, device: torch.device, path: str) -> dict[str, float]:
    """How busy the GPU is over one timed epoch of `n_envs` envs, under the profiler.

    Why: host-epochs per second alone cannot say whether a GPU is saturated or idle between
    launches; the fraction of wall time its kernels run (and the launches per env-epoch) can.
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    envs, ids = warmed_up(n_envs, device, path, epochs_left=2)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        envs.train_epoch(ids, [Decision.wait()] * n_envs)
        synchronize(device)
        wall = time.perf_counter() - start
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA and not e.name.lower().startswith("mem")]
    intervals = [(e.time_range.start / 1e6, e.time_range.end / 1e6) for e in kernels]
    launches = sum(
        e.count for e in prof.key_averages() if e.key in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch")
    )
    return {
        "busy_fraction": round(union_seconds(intervals) / wall, 3),
        "kernel_seconds_per_wall_second": round(sum(end - start for start, end in intervals) / wall, 3),
        "launches_per_env_epoch": launches // n_envs,
        "wall_seconds": round(wall, 3),
    }


def python_profile(n_envs: int, device: torch.device, path: str, lines: int = 30) -> str:
    """Where the CPU's time goes in one epoch of `n_envs` envs (cProfile, by own time): on a GPU
    the Python thread that issues the work is what more envs share."""
    import cProfile
    import io
    import pstats

    envs, ids = warmed_up(n_envs, device, path, epochs_left=2)
    profiler = cProfile.Profile()
    profiler.enable()
    envs.train_epoch(ids, [Decision.wait()] * n_envs)
    synchronize(device)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(lines)
    return text.getvalue()


def ppo_steps_per_second(n_envs: int, device: torch.device, epochs: int, rounds: int, path: str) -> float:
    """PPO env-steps per second over `rounds` rounds, after one warm-up round."""
    envs, learner = make_trainer(n_envs, device, max_epochs=epochs, path=path)
    menvs.run_round(envs, learner)
    synchronize(device)
    steps_before, start = learner.global_step, time.perf_counter()
    for _ in range(rounds):
        menvs.run_round(envs, learner)
    synchronize(device)
    return (learner.global_step - steps_before) / (time.perf_counter() - start)


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
    parser.add_argument("--envs", default="1,2,4,8", help="env counts, comma-separated (the issue's: 1,2,4,8,16,32)")
    parser.add_argument("--epochs", type=int, default=3, help="timed host epochs per env count")
    parser.add_argument("--paths", default="graphs,eager", help="on CUDA: the paths measured, of " + ",".join(PATHS))
    parser.add_argument("--eager-envs", default=None, help="env counts for the eager path (default: --envs)")
    parser.add_argument("--busy-envs", default="1,8", help="env counts profiled for gpu_busy (CUDA)")
    parser.add_argument("--ppo-envs", type=int, default=8)
    parser.add_argument("--ppo-epochs", type=int, default=4, help="host epochs per PPO episode")
    parser.add_argument("--ppo-rounds", type=int, default=1, help="timed PPO rounds (0: skip)")
    parser.add_argument("--ddp", action="store_true", help="also measure policy-DDP efficiency (2 ranks vs 1)")
    parser.add_argument("--rounds", type=int, default=3, help="timed PPO rounds per DDP configuration")
    parser.add_argument("--ddp-envs", type=int, default=2, help="envs per rank in the DDP measurement")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--python-profile", type=int, default=0, help="print a cProfile of one epoch of N envs")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN time its kernels per shape")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = torch.device(args.device)
    counts = [int(n) for n in args.envs.split(",")]
    eager_counts = [int(n) for n in (args.eager_envs or args.envs).split(",")]
    if unknown := [p for p in args.paths.split(",") if p not in PATHS]:
        parser.error(f"--paths {','.join(unknown)}: choose from {','.join(PATHS)}")
    paths = tuple(args.paths.split(",")) if device.type == "cuda" else ("eager",)
    figures: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        **torch_build(),
        "cudnn_benchmark": args.cudnn_benchmark,
        "host_epochs_per_second": {},
        "phases": {},
    }
    for path in paths:
        ns = counts if path == "graphs" or device.type != "cuda" else eager_counts
        measured = {str(n): host_epochs_per_second(n, device, args.epochs, path) for n in ns}
        rates = {n: round(rate, 3) for n, (rate, _) in measured.items()}
        figures["host_epochs_per_second"][path] = rates
        figures["phases"][path] = {n: phases for n, (_, phases) in measured.items()}
        print(json.dumps({path: rates}), file=sys.stderr, flush=True)
    first = figures["host_epochs_per_second"][paths[0]]
    figures["speedup_over_one_env"] = {n: round(r / first[str(counts[0])], 3) for n, r in first.items()}
    if device.type == "cuda":
        busy_counts = [int(n) for n in args.busy_envs.split(",")]
        figures["gpu_busy"] = {p: {str(n): gpu_busy(n, device, p) for n in busy_counts} for p in paths}
    if args.ppo_rounds:
        ppo = {p: ppo_steps_per_second(args.ppo_envs, device, args.ppo_epochs, args.ppo_rounds, p) for p in paths}
        figures["ppo"] = {"envs": args.ppo_envs, "episode_epochs": args.ppo_epochs, "rounds": args.ppo_rounds}
        figures["ppo"]["env_steps_per_second"] = {p: round(v, 3) for p, v in ppo.items()}
        if "graphs" in ppo and "eager" in ppo:
            figures["ppo"]["graphs_over_eager"] = round(ppo["graphs"] / ppo["eager"], 3)
    if args.ddp:
        figures.update(ddp_figures(args))
    if args.python_profile:
        path = "graphs" if device.type == "cuda" else "eager"
        print(python_profile(args.python_profile, device, path), file=sys.stderr)
    text = json.dumps(figures)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


def ddp_figures(args: argparse.Namespace) -> dict:
    threads = torch.get_num_threads()
    one = ddp_throughput(1, args.rounds, args.ddp_envs, args.device)
    torch.set_num_threads(threads)
    figures: dict = {"ddp_steps_per_second": {"1": round(one, 3)}}
    # NCCL refuses two ranks on one GPU, so the 2-rank figure needs a second device.
    if args.device.startswith("cuda") and torch.cuda.device_count() < 2:
        figures["ddp_efficiency"] = None
        figures["ddp_skipped"] = f"needs 2 CUDA devices, found {torch.cuda.device_count()}"
    else:
        two = ddp_throughput(2, args.rounds, args.ddp_envs, args.device)
        figures["ddp_steps_per_second"]["2"] = round(two, 3)
        figures["ddp_efficiency"] = round(two / (2 * one), 3)
    return figures


if __name__ == "__main__":
    sys.exit(main())
