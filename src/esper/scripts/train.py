"""`python -m esper.scripts.train heuristic|ppo [...]`: grow hosts with the heuristic controller,
or learn a controller with PPO (`esper.scripts.ppo`).

Every bad input ends in one line on stderr and exit code 2, before anything is written.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from esper.karn import episode_summary, write_json_atomic
from esper.kasmina.blueprints import blueprint_names
from esper.nissa import ConsoleBackend, JsonlBackend, TelemetryError, TelemetryHub
from esper.scripts.common import (
    OneLineParser,
    UsageError,
    check_minimum,
    check_run_dir,
    load_task_data,
    resolve_blueprints,
    resolve_device_arg,
    resolve_slots,
    resolve_task,
)
from esper.scripts.ppo import add_ppo_parser, distributed_context, resolve_ppo, run_ppo
from esper.simic.distributed import SINGLE_PROCESS, shutdown_distributed
from esper.tamiyo import PREFERRED_BLUEPRINTS, HeuristicController
from esper.tolaria import (
    DEFAULT_TASK,
    TASKS,
    EnvConfig,
    MorphogeneticEnv,
    TaskSpec,
)
from esper.tolaria.datasets import TaskData
from esper.tolaria.episode import run_episode

DEFAULT_MAX_GERMINATIONS = 6
MAX_RNG_SEED = 2**63 - 1
RUN_FILES = ("summary.json", "events.jsonl")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="esper", description="Grow morphogenetic networks.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    h = sub.add_parser("heuristic", help="train with the rule-based controller")
    h.add_argument("--task", default=DEFAULT_TASK, help=f"one of: {', '.join(TASKS)} (default {DEFAULT_TASK})")
    h.add_argument("--episodes", type=int, default=1, help="independent training runs, seeds S, S+1, ... (default 1)")
    h.add_argument("--max-epochs", type=int, default=None, help="host epochs per episode (default: the task's)")
    h.add_argument("--slots", nargs="+", default=None, help="slots the controller may use (default: all of the host's)")
    h.add_argument(
        "--max-germinations",
        type=int,
        default=DEFAULT_MAX_GERMINATIONS,
        help=f"most germinations per episode; 0 trains the host alone (default {DEFAULT_MAX_GERMINATIONS})",
    )
    h.add_argument(
        "--blueprints", nargs="+", default=None, help="blueprints to rotate through (default: all of the topology's)"
    )
    h.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    h.add_argument("--seed", type=int, default=0, help="random seed of the first episode (default 0)")
    h.add_argument(
        "--data-dir", default=None, help="folder of a real dataset (cifar10, textfile); else $ESPER_DATA_DIR"
    )
    h.add_argument(
        "--run-dir", default=None, help="where summary.json and events.jsonl go (default runs/<time>-heuristic-<task>)"
    )
    h.add_argument("--quiet", action="store_true", help="no per-epoch progress lines")
    add_ppo_parser(sub)
    return parser


@dataclass(frozen=True)
class HeuristicRun:
    task: TaskSpec
    data: TaskData
    env: EnvConfig
    episodes: int
    rng_seed: int
    blueprints: tuple[str, ...]
    run_dir: Path
    quiet: bool


def resolve_heuristic(args: argparse.Namespace) -> HeuristicRun:
    """Validate every argument and load the data, raising `UsageError` on the first problem."""
    task = resolve_task(args.task)
    check_minimum("--episodes", args.episodes, 1)
    check_minimum("--seed", args.seed, 0)
    if args.seed + args.episodes > MAX_RNG_SEED:
        limit = MAX_RNG_SEED - args.episodes
        raise UsageError(f"--seed must be < {limit} with {args.episodes} episode(s), got {args.seed}")
    check_minimum("--max-germinations", args.max_germinations, 0)
    max_epochs = task.max_epochs if args.max_epochs is None else args.max_epochs
    check_minimum("--max-epochs", max_epochs, 1)
    device = resolve_device_arg(args.device)
    slots = resolve_slots(task, args.slots)
    default_blueprints = PREFERRED_BLUEPRINTS.get(task.topology, blueprint_names(task.topology))
    blueprints = resolve_blueprints(task, args.blueprints, default_blueprints)
    run_dir = (
        Path(args.run_dir) if args.run_dir else Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-heuristic-{task.name}"
    )
    check_run_dir(run_dir, RUN_FILES)
    data = load_task_data(task, args.data_dir)
    env = EnvConfig(
        task=task, device=device, max_epochs=max_epochs, enabled_slots=slots, max_germinations=args.max_germinations
    )
    return HeuristicRun(task, data, env, args.episodes, args.seed, blueprints, run_dir, args.quiet)


def run_heuristic(run: HeuristicRun) -> dict:
    run.run_dir.mkdir(parents=True, exist_ok=True)
    backends = [JsonlBackend(run.run_dir / "events.jsonl")]
    if not run.quiet:
        backends.append(ConsoleBackend())
    hub = TelemetryHub(backends)
    env = MorphogeneticEnv(run.env, run.data, emit=hub.emit)
    controller = HeuristicController(
        run.task.topology, run.env.enabled_slots, run.blueprints, thresholds=run.env.thresholds
    )
    print(
        f"esper heuristic: task {run.task.name}, {run.episodes} episode(s) x {run.env.max_epochs} epochs, "
        f"slots {' '.join(run.env.enabled_slots)}, max germinations {run.env.max_germinations}, "
        f"device {run.env.device}, run dir {run.run_dir}",
        flush=True,
    )
    outcomes = []
    try:
        for i in range(run.episodes):
            outcomes.append(run_episode(env, controller, rng_seed=run.rng_seed + i, episode=i))
    finally:
        hub.close()
    slot_names = [s.name for s in env.model.slot_ids] if env.model is not None else list(run.env.enabled_slots)
    summary = episode_summary(
        run.task.name,
        "heuristic",
        slot_names,
        outcomes,
        run.data.split_sizes(),
        {
            "task": run.task.name,
            "episodes": run.episodes,
            "max_epochs": run.env.max_epochs,
            "slots": list(run.env.enabled_slots),
            "max_germinations": run.env.max_germinations,
            "blueprints": list(run.blueprints),
            "device": str(run.env.device),
            "seed": run.rng_seed,
            "torch": torch.__version__,
        },
    )
    write_json_atomic(run.run_dir / "summary.json", summary)
    print(
        f"final test accuracy {summary['final_test_accuracy']:.2f}%, selection (val) accuracy "
        f"{summary['final_val_accuracy']:.2f}% (means of {len(outcomes)}); summary in {run.run_dir / 'summary.json'}",
        flush=True,
    )
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    ctx = SINGLE_PROCESS
    try:
        args = build_parser().parse_args(argv)
        if args.command == "ppo":
            ctx = distributed_context(args)  # under torchrun: join the group before anything else
            run, execute = resolve_ppo(args, ctx), run_ppo
            ctx.barrier()  # every rank has checked its arguments before rank 0 writes
        else:
            run, execute = resolve_heuristic(args), run_heuristic
    except UsageError as exc:
        print(f"esper: error: {exc}", file=sys.stderr)
        shutdown_distributed(graceful=False)
        return 2
    try:
        execute(run)
    except TelemetryError as exc:
        print(f"esper: error: {exc}", file=sys.stderr)
        shutdown_distributed(graceful=False)
        return 1
    except BrokenPipeError:
        # stdout was closed (e.g. `esper heuristic | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        shutdown_distributed(graceful=False)
        return 1
    except BaseException:
        shutdown_distributed(graceful=False)
        raise
    shutdown_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
