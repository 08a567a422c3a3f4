"""`python -m esper.scripts.train heuristic [...]`: grow a host with the heuristic controller.

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
from typing import NoReturn

import torch

from esper.karn import episode_summary, write_json_atomic
from esper.kasmina.blueprints import blueprint_names, get_blueprint
from esper.leyline import parse_slots
from esper.nissa import ConsoleBackend, JsonlBackend, TelemetryError, TelemetryHub
from esper.tamiyo import PREFERRED_BLUEPRINTS, HeuristicController
from esper.tolaria import (
    DEFAULT_TASK,
    TASKS,
    DatasetError,
    DeviceError,
    EnvConfig,
    MorphogeneticEnv,
    TaskSpec,
    get_task,
    resolve_device,
)
from esper.tolaria.datasets import TaskData
from esper.tolaria.episode import run_episode

DEFAULT_MAX_SEEDS = 6
MAX_SEED = 2**63 - 1
RUN_FILES = ("summary.json", "events.jsonl")


class UsageError(Exception):
    """Bad input: reported as one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; Esper prints just the error, on one line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="esper", description="Grow morphogenetic networks.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    h = sub.add_parser("heuristic", help="train with the rule-based controller")
    h.add_argument("--task", default=DEFAULT_TASK, help=f"one of: {', '.join(TASKS)} (default {DEFAULT_TASK})")
    h.add_argument("--episodes", type=int, default=1, help="independent training runs, seeds S, S+1, ... (default 1)")
    h.add_argument("--max-epochs", type=int, default=None, help="host epochs per episode (default: the task's)")
    h.add_argument("--slots", nargs="+", default=None, help="slots the controller may use (default: all of the host's)")
    h.add_argument(
        "--max-seeds",
        type=int,
        default=DEFAULT_MAX_SEEDS,
        help=f"most germinations per episode; 0 trains the host alone (default {DEFAULT_MAX_SEEDS})",
    )
    h.add_argument(
        "--blueprints", nargs="+", default=None, help="blueprints to rotate through (default: all of the topology's)"
    )
    h.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    h.add_argument("--seed", type=int, default=0, help="seed of the first episode (default 0)")
    h.add_argument(
        "--data-dir", default=None, help="folder of a real dataset (cifar10, textfile); else $ESPER_DATA_DIR"
    )
    h.add_argument(
        "--run-dir", default=None, help="where summary.json and events.jsonl go (default runs/<time>-heuristic-<task>)"
    )
    h.add_argument("--quiet", action="store_true", help="no per-epoch progress lines")
    return parser


@dataclass(frozen=True)
class HeuristicRun:
    task: TaskSpec
    data: TaskData
    env: EnvConfig
    episodes: int
    seed: int
    blueprints: tuple[str, ...]
    run_dir: Path
    quiet: bool


def _positive(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {value}")


def check_run_dir(run_dir: Path) -> None:
    """The run directory must be creatable and must not already hold a run (nothing is overwritten)."""
    try:
        existing = [name for name in RUN_FILES if (run_dir / name).exists()]
        ancestor = run_dir
        while not ancestor.exists():
            ancestor = ancestor.parent
    except OSError as exc:
        raise UsageError(f"--run-dir {str(run_dir)!r} cannot be checked: {exc.strerror or exc}") from None
    if existing:
        raise UsageError(
            f"run directory {str(run_dir)!r} already holds a run ({', '.join(existing)}); choose a new --run-dir"
        )
    if not ancestor.is_dir():
        raise UsageError(f"--run-dir {str(run_dir)!r} cannot be created: {str(ancestor)!r} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"--run-dir {str(run_dir)!r} cannot be created: {str(ancestor)!r} is not writable")


def resolve_heuristic(args: argparse.Namespace) -> HeuristicRun:
    """Validate every argument and load the data, raising `UsageError` on the first problem."""
    try:
        task = get_task(args.task)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _positive("--episodes", args.episodes, 1)
    _positive("--seed", args.seed, 0)
    if args.seed + args.episodes > MAX_SEED:
        limit = MAX_SEED - args.episodes
        raise UsageError(f"--seed must be < {limit} with {args.episodes} episode(s), got {args.seed}")
    _positive("--max-seeds", args.max_seeds, 0)
    max_epochs = task.max_epochs if args.max_epochs is None else args.max_epochs
    _positive("--max-epochs", max_epochs, 1)
    try:
        device = resolve_device(args.device)
    except DeviceError as exc:
        raise UsageError(str(exc)) from None
    host_slots = task.build_host().slot_ids
    try:
        slots = parse_slots(args.slots, host_slots) if args.slots is not None else host_slots
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.blueprints is not None:
        try:
            blueprints = tuple(get_blueprint(task.topology, b).name for b in args.blueprints)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    else:
        blueprints = PREFERRED_BLUEPRINTS.get(task.topology, blueprint_names(task.topology))
    run_dir = (
        Path(args.run_dir) if args.run_dir else Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-heuristic-{task.name}"
    )
    check_run_dir(run_dir)
    try:
        data = task.load_data(task.resolve_data_dir(args.data_dir))
    except DatasetError as exc:
        raise UsageError(str(exc)) from None
    env = EnvConfig(
        task=task,
        device=device,
        max_epochs=max_epochs,
        enabled_slots=tuple(s.name for s in slots),
        max_seeds=args.max_seeds,
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
        f"slots {' '.join(run.env.enabled_slots)}, max seeds {run.env.max_seeds}, device {run.env.device}, "
        f"run dir {run.run_dir}",
        flush=True,
    )
    outcomes = []
    try:
        for i in range(run.episodes):
            outcomes.append(run_episode(env, controller, seed=run.seed + i, episode=i))
    finally:
        hub.close()
    slot_names = [s.name for s in env.model.slot_ids] if env.model is not None else list(run.env.enabled_slots)
    summary = episode_summary(
        run.task.name,
        "heuristic",
        slot_names,
        outcomes,
        {
            "task": run.task.name,
            "episodes": run.episodes,
            "max_epochs": run.env.max_epochs,
            "slots": list(run.env.enabled_slots),
            "max_seeds": run.env.max_seeds,
            "blueprints": list(run.blueprints),
            "device": str(run.env.device),
            "seed": run.seed,
            "torch": torch.__version__,
        },
    )
    write_json_atomic(run.run_dir / "summary.json", summary)
    print(
        f"final val accuracy {summary['final_val_accuracy']:.2f}% (mean of {len(outcomes)}); "
        f"summary in {run.run_dir / 'summary.json'}",
        flush=True,
    )
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        run = resolve_heuristic(args)
    except UsageError as exc:
        print(f"esper: error: {exc}", file=sys.stderr)
        return 2
    try:
        run_heuristic(run)
    except TelemetryError as exc:
        print(f"esper: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # stdout was closed (e.g. `esper heuristic | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
