"""The run of `esper heuristic` and `esper grow` (`esper.runs.heuristic`, `esper.runs.grow`):
grow hosts episode after episode with the heuristic controller (or, with `grow`, any
controller: a learned policy, random, static), resumable by episode.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from esper.karn import episode_summary, write_atomic, write_json_atomic, write_torch_atomic
from esper.runs.common import (
    MAX_RNG_SEED,
    AlreadyFinished,
    UsageError,
    apply_deterministic,
    check_host_builds,
    check_minimum,
    check_run_dir,
    check_same_run,
    env_config,
    heuristic_knobs_source,
    load_task_data,
    progress_bar,
    resolve_device_arg,
    resolve_slots,
    resolve_task,
    run_telemetry,
    torch_build,
    tracking_project,
)
from esper.runs.config import (
    HEURISTIC_GROUPS,
    config_file,
    merge_settings,
    over_tuned_heuristic,
    parse_knobs,
    resolved_config,
)
from esper.runs.eval_run import (
    SIZED_STATICS,
    ControllerSpec,
    check_controller,
    check_heuristic_fits,
    keeping_every_seed,
    make_controller,
    parse_controller,
    resolve_heuristic_blueprints,
)
from esper.runs.stopping import GracefulStop, StopRequested
from esper.simic.distributed import SINGLE_PROCESS
from esper.tamiyo import HeuristicConfig
from esper.tolaria import (
    DEFAULT_TASK,
    EnvConfig,
    MorphogeneticEnv,
    TaskSpec,
)
from esper.tolaria.datasets import TaskData
from esper.tolaria.episode import EpisodeOutcome, run_episode

DEFAULT_MAX_GERMINATIONS = 6
RUN_FILES = ("summary.json", "events.jsonl", "config.json", "grown", "tensorboard", "episodes")


HEURISTIC_DEFAULTS: dict[str, Any] = {
    "task": DEFAULT_TASK,
    "episodes": 1,
    "max_epochs": None,  # the task's
    "slots": None,  # all of the host's
    "max_germinations": DEFAULT_MAX_GERMINATIONS,
    "blueprints": None,  # the heuristic's rotation, random's choice (None: the knobs' order, all)
    "device": "cpu",
    "seed": 0,
    "data_dir": None,
    "deterministic": None,  # off; None, not False, so a run recorded before the flag resumes
}
"""Settings of a heuristic run, by flag name; a config file's top-level keys may set them too."""

GROW_DEFAULTS: dict[str, Any] = {**HEURISTIC_DEFAULTS, "controller": "heuristic", "sample": False}
"""A `grow` run's: a heuristic run's, and the controller that grows."""
GROW_CONTROLLERS = (
    "static random heuristic[:FILE] naive:BLUEPRINT@EPOCH naive:SLOT=BLUEPRINT@EPOCH,... schedule:SCHEDULE "
    "policy:PATH|NAME (a shipped policy, e.g. policy:shapes)"
)


@dataclass(frozen=True)
class GrowthRun:
    """A `heuristic` or `grow` run: episodes of one controller, each growing a fresh host."""

    controller: ControllerSpec
    sample: bool
    task: TaskSpec
    data: TaskData
    env: EnvConfig
    episodes: int
    rng_seed: int
    blueprints: tuple[str, ...] | None
    """`--blueprints`: what the heuristic and `random` choose from (None: their own defaults)."""
    heuristic: HeuristicConfig
    config: dict[str, Any]
    """The resolved settings and knobs, as the run directory records them."""
    run_dir: Path
    quiet: bool
    wandb_project: str | None = None
    """`--track`: the W&B project to log to."""
    finished: tuple[EpisodeOutcome, ...] = ()
    """`--resume last`: the episodes the run directory already holds, in order."""


def resolve_growth(args: argparse.Namespace, rest: Sequence[str] = ()) -> GrowthRun:
    """Validate every setting and knob and load the data, raising `UsageError` on the first problem."""
    defaults = GROW_DEFAULTS if args.command == "grow" else HEURISTIC_DEFAULTS
    file_settings, file_knobs = config_file(args, defaults, HEURISTIC_GROUPS)
    settings = merge_settings(defaults, file_settings, args=args)
    task = resolve_task(settings["task"])
    knobs = parse_knobs(HEURISTIC_GROUPS, rest, over_tuned_heuristic(task.name, file_knobs))
    task = knobs["host"].apply(task)
    check_host_builds(task, knobs["host"].width)
    slots = resolve_slots(task, settings["slots"])
    controller = resolve_grow_controller(settings.get("controller", "heuristic"), task, knobs["host"].width, slots)
    episodes, rng_seed = settings["episodes"], settings["seed"]
    check_minimum("--episodes", episodes, 1)
    check_minimum("--seed", rng_seed, 0)
    if rng_seed + episodes > MAX_RNG_SEED:
        raise UsageError(f"--seed must be < {MAX_RNG_SEED - episodes} with {episodes} episode(s), got {rng_seed}")
    check_minimum("--max-germinations", settings["max_germinations"], 0)
    max_epochs = task.max_epochs if settings["max_epochs"] is None else settings["max_epochs"]
    check_minimum("--max-epochs", max_epochs, 1)
    knobs["host"] = knobs["host"].with_episode_warmup(task, max_epochs)
    device = resolve_device_arg(settings["device"])
    apply_deterministic(settings)
    blueprints = resolve_heuristic_blueprints(
        task, knobs["heuristic"], settings["blueprints"], knobs["host"].width, slots
    )
    pins_source = heuristic_knobs_source(args.config, rest)
    check_heuristic_fits(task, controller, knobs["heuristic"], blueprints, knobs["host"].width, slots, pins_source)
    run_dir = Path(args.run_dir or Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{args.command}-{task.name}")
    config = resolved_config(args.command, settings, knobs)
    finished = resumed_episodes(args, run_dir, config, episodes)
    data = load_task_data(task, settings["data_dir"])
    env = env_config(
        task=task,
        device=device,
        max_epochs=max_epochs,
        enabled_slots=slots,
        max_germinations=settings["max_germinations"],
        thresholds=knobs["gates"],
        governor=knobs["governor"],
        host_width=knobs["host"].width,
        lr_warmup_epochs=knobs["host"].lr_warmup_epochs,
    )
    if controller.kind == "schedule":
        env = dataclasses.replace(env, thresholds=keeping_every_seed(env.thresholds))
    return GrowthRun(
        controller,
        bool(settings.get("sample", False)),
        task,
        data,
        env,
        episodes,
        rng_seed,
        blueprints,
        knobs["heuristic"],
        config,
        run_dir,
        args.quiet,
        tracking_project(args),
        finished,
    )


def resumed_episodes(
    args: argparse.Namespace, run_dir: Path, config: dict[str, Any], episodes: int
) -> tuple[EpisodeOutcome, ...]:
    """The episodes a `--resume last` run has already finished (none for a new run, whose
    directory must not hold a run)."""
    if args.resume is None:
        check_run_dir(run_dir, RUN_FILES)
        return ()
    if args.run_dir is None:
        raise UsageError("--resume last needs --run-dir: the run directory to continue (or to start)")
    return finished_episodes(run_dir, config, episodes)


def resolve_grow_controller(
    text: str, task: TaskSpec, host_width: int | None, slots: Sequence[str] | None = None
) -> ControllerSpec:
    """The controller of a `grow` run: any of `eval`'s but `matched` and `compute` (which are
    sized after the other controllers of an eval); a policy must fit the task."""
    try:
        spec = parse_controller(text)
    except UsageError:
        spec = None
    if spec is None or spec.kind in SIZED_STATICS:
        raise UsageError(f"--controller: unknown controller {text!r}; choose from: {GROW_CONTROLLERS}")
    check_controller(spec, task, seeds=(), flag="--controller", host_width=host_width, slots=slots)
    return spec


def keep_events_before(path: Path, episode: int) -> None:
    """Drop the events of episodes from `episode` on (an episode a stop or a kill left
    unfinished is run again, and its events written again)."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines(keepends=True) if _episode_of(line) < episode]
    write_atomic(path, lambda f: f.write("".join(kept).encode("utf-8")))


def _episode_of(line: str) -> int:
    try:
        return int(json.loads(line)["episode"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return sys.maxsize  # a line a kill cut short: dropped


EPISODES_DIR = "episodes"
"""`RUN/episodes/episode-NNNN.json`: each finished episode's outcome, what a resume reads."""


def finished_episodes(run_dir: Path, config: dict[str, Any], episodes: int) -> tuple[EpisodeOutcome, ...]:
    """The episodes 0, 1, ... that `run_dir` finished, if it was run with these same settings
    (apart from the number of episodes); none for a new or empty directory."""
    if not check_same_run(run_dir, config, frozenset({"episodes"})):
        check_run_dir(run_dir, RUN_FILES)  # a fresh start: nothing of another kind may be there
        return ()
    outcomes = []
    for number in range(episodes):
        path = run_dir / EPISODES_DIR / f"episode-{number:04d}.json"
        if not path.exists():
            break
        outcomes.append(EpisodeOutcome.from_json(json.loads(path.read_text())))
    if len(outcomes) == episodes and (run_dir / "summary.json").exists():
        raise AlreadyFinished(run_dir, episodes, episodes)
    return tuple(outcomes)  # all of them, without a summary: the run writes it


def growth_summary(run: GrowthRun, env: MorphogeneticEnv, outcomes: list[EpisodeOutcome]) -> dict:
    """`summary.json` of a finished run: the episodes' results with the settings they ran."""
    slot_names = [s.name for s in env.model.slot_ids] if env.model is not None else list(run.env.enabled_slots)
    settings = {
        "task": run.task.name,
        "episodes": run.episodes,
        "max_epochs": run.env.max_epochs,
        "slots": list(run.env.enabled_slots),
        "max_germinations": run.env.max_germinations,
        "blueprints": None if run.blueprints is None else list(run.blueprints),
        "device": str(run.env.device),
        "seed": run.rng_seed,
        **torch_build(),
    }
    return episode_summary(run.task.name, run.controller.name, slot_names, outcomes, run.data.split_sizes(), settings)


def run_growth(run: GrowthRun) -> dict:
    run.run_dir.mkdir(parents=True, exist_ok=True)
    start = len(run.finished)
    if start or (run.run_dir / "events.jsonl").exists():
        keep_events_before(run.run_dir / "events.jsonl", start)  # an unfinished episode is run again
    total = (run.episodes - start) * run.env.max_epochs
    bar = progress_bar(total, "epoch", run.quiet)
    hub = run_telemetry(
        run.run_dir,
        run.config,
        console=not run.quiet,
        wandb_project=run.wandb_project,
        write_line=lambda line: tqdm.write(line, file=sys.stdout),
    )
    outcomes = list(run.finished)
    seeds_grown = sum(len(o.records) for o in outcomes)
    env = MorphogeneticEnv(run.env, run.data, emit=hub.emit, first_seed_number=seeds_grown + 1)
    controller = make_controller(run.controller, run.env, run.heuristic, run.sample, run.rng_seed, run.blueprints)
    write_json_atomic(run.run_dir / "config.json", run.config)
    command = "heuristic" if run.controller.name == "heuristic" else f"grow with {run.controller.name}"
    print(
        f"esper {command}: task {run.task.name}, {run.episodes} episode(s) x {run.env.max_epochs} epochs, "
        f"slots {' '.join(run.env.enabled_slots)}, max germinations {run.env.max_germinations}, "
        f"device {run.env.device}, run dir {run.run_dir}",
        flush=True,
    )
    if start:
        print(f"resuming at episode {start}: {start} of {run.episodes} already finished", flush=True)
    stop_code = 0
    try:
        with GracefulStop("this episode is finished and saved") as stop:
            for i in range(start, run.episodes):
                outcome = run_episode(env, controller, rng_seed=run.rng_seed + i, episode=i, on_step=bar.update)
                record = outcome.to_json()
                write_torch_atomic(run.run_dir / "grown" / f"episode-{i:04d}.pt", env.grown_network(record))
                write_json_atomic(run.run_dir / EPISODES_DIR / f"episode-{i:04d}.json", record)
                outcomes.append(outcome)
                stop_code = stop.exit_code(SINGLE_PROCESS)
                if stop_code:
                    break
    finally:
        hub.close()
        bar.close()
    if stop_code and len(outcomes) < run.episodes:
        raise StopRequested(
            stop_code,
            f"stopped after episode {len(outcomes) - 1} ({len(outcomes)} of {run.episodes} finished); continue with "
            f"the same command and --resume last --run-dir {run.run_dir}",
        )
    summary = growth_summary(run, env, outcomes)
    write_json_atomic(run.run_dir / "summary.json", summary)
    print(
        f"final test accuracy {summary['final_test_accuracy']:.2f}%, selection (val) accuracy "
        f"{summary['final_val_accuracy']:.2f}% (means of {len(outcomes)}); summary in {run.run_dir / 'summary.json'}; "
        f"curves: tensorboard --logdir {run.run_dir}",
        flush=True,
    )
    return summary
