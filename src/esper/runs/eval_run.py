"""The run of `esper eval` (`esper.runs.evaluate`): several controllers on the same held-out
seeds, compared paired.

For each seed every controller trains a host from the same initialisation on the same data
order (the env's generators derive from the seed alone), so the per-seed differences between
two controllers cancel what the seed decides, and the claim is their mean with a 95% interval.
The test split is read once per episode, after its last decision, and only reported.

Controllers: `static` (never grows), `heuristic` or `heuristic:FILE` (the rule-based controller,
with a TOML/YAML/JSON file's `[heuristic]` table), `random` (uniform among the valid actions),
`policy:PATH` (a `ppo` checkpoint, greedy unless `--sample`), and `matched`: a static host
widened to about the mean parameter count (host plus kept seeds) the growing controllers of the
same call ended with, so "growth pays" is compared with simply starting bigger. Episodes run in
worker processes with one thread each (`--workers 0`: one by one in this process).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import concurrent.futures.process
import contextlib
import dataclasses
import functools
import json
import math
import multiprocessing
import os
import signal
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations, islice
from pathlib import Path
from typing import Any

import torch

from esper.karn import estimate, paired_difference, write_json_atomic
from esper.karn.evaluation import added_params
from esper.karn.rundir import read_jsonl
from esper.leyline import GateThresholds
from esper.nissa import Event, TelemetryHub
from esper.nissa.tensorboard import EVAL_RESULT, TensorBoardBackend
from esper.runs.common import (
    MAX_RNG_SEED,
    RunFailure,
    UsageError,
    apply_deterministic,
    check_blueprints_fit,
    check_heuristic_pins,
    check_host_builds,
    check_minimum,
    check_run_dir,
    check_same_run,
    env_config,
    heuristic_knobs_source,
    load_task_data,
    resolve_blueprints,
    resolve_device_arg,
    resolve_slots,
    resolve_task,
    torch_build,
)
from esper.runs.config import (
    Group,
    HostTraining,
    config_file,
    merge_settings,
    over_tuned_heuristic,
    parse_knobs,
    read_config_file,
    resolved_config,
    split_config,
)
from esper.runs.stopping import GracefulStop, StopRequested
from esper.simic.checkpoint import CheckpointError, policy_sha256
from esper.simic.controller import PolicyController
from esper.simic.distributed import SINGLE_PROCESS
from esper.tamiyo import (
    HEADS,
    HeuristicConfig,
    HeuristicController,
    NaiveGrowthController,
    RandomController,
    StaticController,
    heuristic_rotation,
    is_policy_name,
    trained_policy_names,
    trained_policy_path,
)
from esper.tamiyo.diagnostics import DecisionDiagnostics
from esper.tolaria import EnvConfig, GovernorConfig, MorphogeneticEnv, TaskSpec, get_task, use_deterministic_kernels
from esper.tolaria.compute import width_for_train_gflops
from esper.tolaria.episode import Controller, run_episode

EVAL_GROUPS: dict[str, Group] = {
    "heuristic": HeuristicConfig,
    "gates": GateThresholds,
    "governor": GovernorConfig,
    "host": HostTraining,
}
"""The knobs of `esper eval`: the heuristic's (for `heuristic` without a file) and the env's."""

EVAL_DEFAULTS: dict[str, Any] = {
    "task": "shapes",
    "controllers": None,
    "seeds": None,
    "max_epochs": None,
    "slots": None,
    "max_germinations": 6,
    "blueprints": None,
    "device": "cpu",
    "data_dir": None,
    "workers": None,
    "sample": False,
    "deterministic": None,  # off; None, not False, so an eval recorded before the flag resumes
}
RUN_FILES = ("eval.json", "config.json", "tensorboard", "episodes.jsonl")
EPISODES_FILE = "episodes.jsonl"
"""Each finished episode's result, one line each, as it completes: what `--resume last` reads."""
BASELINES = ("static", "matched", "compute", "heuristic", "random")
"""What a learned controller is compared against, paired, in this order."""
GROWING = ("heuristic", "naive", "schedule", "random", "policy")
SCHEDULED = ("naive", "schedule")
"""Controllers that grow on a fixed schedule (`NaiveGrowthController`)."""
EPISODE_KEYS = (
    "test_accuracy",
    "val_accuracy",
    "seed_params",
    "host_params",
    "fossilized",
    "culled",
    "seconds",
    "train_gflops",
    "measure_gflops",
    "grown_seeds",
)
"""What eval.json lists per controller, one entry per RNG seed; `grown_seeds` holds the record of
every seed module the episode grew (slot, blueprint, stage history with epochs, final stage)."""
CONTROLLER_HELP = (
    "static matched compute heuristic[:FILE] naive:BLUEPRINT@EPOCH random policy:PATH|NAME (a shipped policy, "
    "e.g. policy:shapes); naive: grow BLUEPRINT once in every enabled slot (--slots) from EPOCH on and keep "
    "what the gates pass (naive:SLOT=BLUEPRINT@EPOCH,...: a schedule per slot); schedule:SLOT=BLUEPRINT@EPOCH,... "
    "(or schedule:BLUEPRINT@EPOCH): the same schedule with every seed kept, never culled on probation; "
    "matched: a static host of the growing controllers' mean final size; compute: a static host whose "
    "whole run costs the growing controllers' mean training FLOPs"
)
SIZED_STATICS = ("matched", "compute")
"""Static hosts whose width is chosen after the growing controllers have run."""


@dataclass(frozen=True)
class ControllerSpec:
    """One controller of an eval, picklable so a worker process can build it."""

    name: str
    """As given on the command line (the key in the table and in eval.json)."""
    kind: str
    path: str | None = None

    @property
    def grows(self) -> bool:
        return self.kind in GROWING


@dataclass(frozen=True)
class EvalRun:
    task: TaskSpec
    env: EnvConfig
    controllers: tuple[ControllerSpec, ...]
    seeds: tuple[int, ...]
    heuristic: HeuristicConfig
    blueprints: tuple[str, ...] | None
    """`--blueprints`: what the heuristic and `random` choose from (None: their own defaults)."""
    sample: bool
    data_dir: str | None
    host_knobs: dict[str, Any]
    workers: int
    config: dict[str, Any]
    run_dir: Path
    finished: tuple[dict[str, Any], ...] = ()
    """`--resume last`: the episode results the run directory already holds."""
    policy_hashes: dict[str, str] = dataclasses.field(default_factory=dict)
    """Each policy controller's `policy_sha256` as the run began."""


# --------------------------------------------------------------------------- arguments


MAX_EVAL_SEEDS = 100_000
"""More held-out seeds than one eval can run (each is an episode per controller)."""


def parse_seeds(text: str | None) -> tuple[int, ...]:
    if text is None:
        raise UsageError("--seeds A:B is required (the held-out seeds A, A+1, ..., B-1)")
    start, colon, stop = text.partition(":")
    try:
        seeds = range(int(start), int(stop))
    except ValueError:
        raise UsageError(f"--seeds {text!r}: expected A:B with integers A < B, as in Python (0:10)") from None
    if not colon or not seeds:
        raise UsageError(f"--seeds {text!r} is an empty range: expected A:B with A < B")
    if seeds[0] < 0:
        raise UsageError(f"--seeds {text!r}: seeds must be >= 0")
    if len(seeds) > MAX_EVAL_SEEDS or seeds[-1] >= MAX_RNG_SEED:
        raise UsageError(f"--seeds {text!r}: at most {MAX_EVAL_SEEDS:,} seeds, each below {MAX_RNG_SEED:,}")
    return tuple(seeds)


def parse_controller(text: str) -> ControllerSpec:
    kind, colon, path = text.partition(":")
    if kind in ("static", *SIZED_STATICS, "random") and not colon:
        return ControllerSpec(text, kind)
    if kind == "heuristic":
        return ControllerSpec(text, kind, path or None)
    if kind in SCHEDULED and path:
        naive_schedule(text, path)
        return ControllerSpec(text, kind, path)
    if kind == "policy" and path:
        shipped = trained_policy_path(path)
        return ControllerSpec(text, kind, str(shipped) if shipped else path)
    raise UsageError(f"--controllers: unknown controller {text!r}; choose from: {CONTROLLER_HELP}")


NAIVE_FORMS = "naive:BLUEPRINT@EPOCH (every enabled slot) or naive:SLOT=BLUEPRINT@EPOCH[,SLOT=BLUEPRINT@EPOCH...]"


def keeping_every_seed(thresholds: GateThresholds) -> GateThresholds:
    """`thresholds` under which no seed is culled on probation and G4 passes at any contribution:
    a `schedule:` run keeps every seed it grows, as naive growth in the growth literature does
    (Esper's `naive:` keeps only what the gates pass). Dwell times and the health culls stand."""
    return dataclasses.replace(thresholds, probation_cull_contribution=-math.inf, fossilize_min_contribution=-math.inf)


def naive_schedule(name: str, path: str) -> tuple[tuple[str | None, str, int], ...]:
    """The growth schedule of a `naive:` controller, as (slot, blueprint, epoch) entries: one
    with slot None for `BLUEPRINT@EPOCH` (every enabled slot), else one per `SLOT=BLUEPRINT@EPOCH`."""
    entries = []
    for part in path.split(","):
        slot, equals, rest = part.rpartition("=")
        blueprint, at, epoch = rest.partition("@")
        if (equals and not slot) or not at or not blueprint or not epoch.isdigit():
            raise UsageError(f"--controllers {name}: expected {NAIVE_FORMS}, each epoch >= 0 (naive:widen_100@5)")
        entries.append((slot or None, blueprint, int(epoch)))
    slots = [slot for slot, _, _ in entries]
    if len(entries) > 1 and None in slots:
        raise UsageError(
            f"--controllers {name}: name a slot in every entry of a schedule (naive:mid=widen_25@5,late=widen_25@5)"
        )
    if len(set(slots)) != len(slots):
        raise UsageError(f"--controllers {name}: the schedule names a slot twice")
    return tuple(entries)


def naive_slot_schedule(
    name: str, path: str, enabled_slots: Sequence[str], flag: str = "--controllers"
) -> dict[str, tuple[str, int]]:
    """A `naive:` controller's schedule per slot, in host order: every enabled slot for the
    `BLUEPRINT@EPOCH` form; a slot a schedule names must be enabled (`--slots`; `flag`: the option
    that named the controller, for the error)."""
    entries = naive_schedule(name, path)
    if entries[0][0] is None:
        _, blueprint, epoch = entries[0]
        return {slot: (blueprint, epoch) for slot in enabled_slots}
    by_slot = {slot: (blueprint, epoch) for slot, blueprint, epoch in entries}
    for slot in by_slot:
        if slot not in enabled_slots:
            raise UsageError(f"{flag} {name}: slot {slot!r} is not enabled; choose from: {' '.join(enabled_slots)}")
    return {slot: by_slot[slot] for slot in enabled_slots if slot in by_slot}


def resolve_controllers(
    names: list[str] | None,
    task: TaskSpec,
    seeds: tuple[int, ...],
    host_width: int | None = None,
    slots: Sequence[str] | None = None,
) -> tuple[ControllerSpec, ...]:
    if not names:
        raise UsageError(f"--controllers is required: one or more of: {CONTROLLER_HELP}")
    specs = tuple(parse_controller(name) for name in names)
    if len({s.name for s in specs}) != len(specs):
        raise UsageError(f"--controllers names a controller twice: {' '.join(names)}")
    for sized in SIZED_STATICS:
        if sized in {s.kind for s in specs} and not any(s.grows for s in specs):
            raise UsageError(f"--controllers: {sized} needs a growing controller (heuristic, random or policy:PATH)")
    for spec in specs:
        check_controller(spec, task, seeds, host_width=host_width, slots=slots)
    return specs


def check_controller(
    spec: ControllerSpec,
    task: TaskSpec,
    seeds: tuple[int, ...],
    flag: str = "--controllers",
    host_width: int | None = None,
    slots: Sequence[str] | None = None,
) -> None:
    """What a controller reads loads: a policy fits the task and never trained on `seeds`; a
    heuristic file holds valid knobs; naive growth's blueprint fits each slot it grows in (the
    run's `slots`, default every slot) of the host at `host_width` (`flag`: the option that named
    it, for the error)."""
    if spec.kind == "policy":
        check_policy(spec, task, seeds, flag)
    if spec.kind == "heuristic" and spec.path:
        knobs = heuristic_from_file(spec.path, HeuristicConfig())  # its errors name the file
        try:
            check_heuristic_order(task, knobs)
        except UsageError as exc:
            raise UsageError(f"heuristic:{spec.path}: {exc}") from None
    if spec.kind in SCHEDULED:
        enabled = slots or [s.name for s in task.slot_ids]
        for slot, (blueprint, _) in naive_slot_schedule(spec.name, spec.path or "", enabled, flag).items():
            check_blueprints_fit(task, host_width, [slot], [blueprint], f"{flag} {spec.name}")


def check_policy(spec: ControllerSpec, task: TaskSpec, seeds: tuple[int, ...], flag: str = "--controllers") -> None:
    """The checkpoint loads, fits the task, and was not trained on any of the seeds (`flag`: the
    option that named it, for the error)."""
    try:
        controller = PolicyController.from_checkpoint(spec.path)
    except CheckpointError as exc:
        if not Path(spec.path).exists() and is_policy_name(spec.path):
            shipped = " ".join(trained_policy_names()) or "none"
            raise UsageError(
                f"{flag} {spec.name}: no shipped policy and no file {spec.path!r} (shipped policies: {shipped})"
            ) from None
        raise UsageError(f"{flag} {spec.name}: {exc}") from None
    if controller.task_name != task.name:
        raise UsageError(
            f"{flag} {spec.name}: the policy was trained on task {controller.task_name!r}, not {task.name!r}"
        )
    overlap = sorted(set(seeds) & set(controller.training_seeds))
    if overlap:
        more = f" (and {len(overlap) - 1} more of these)" if len(overlap) > 1 else ""
        raise UsageError(
            f"--seeds: {spec.name} was trained on seed {overlap[0]}{more}; evaluate on seeds it never trained on"
        )


def check_heuristic_order(task: TaskSpec, knobs: HeuristicConfig) -> None:
    """The heuristic's `blueprint_order` names blueprints of the task."""
    resolve_blueprints(task, knobs.blueprint_order or None, ())


def resolve_heuristic_blueprints(
    task: TaskSpec,
    knobs: HeuristicConfig,
    flag: Sequence[str] | None,
    host_width: int | None,
    slots: Sequence[str],
) -> tuple[str, ...] | None:
    """`--blueprints` (None when not given), once it and the heuristic's `blueprint_order` are
    checked to name blueprints of the task and `--blueprints` to fit every enabled slot of the
    host at `host_width` (`eval` and `grow` share this)."""
    check_heuristic_order(task, knobs)
    blueprints = resolve_blueprints(task, flag, ()) or None
    check_blueprints_fit(task, host_width, slots, blueprints)
    return blueprints


def heuristic_knobs(spec: ControllerSpec, defaults: HeuristicConfig) -> HeuristicConfig:
    """The knobs a heuristic controller runs with: its file's over the run's (`heuristic:FILE`),
    or the run's."""
    return heuristic_from_file(spec.path, defaults) if spec.path else defaults


def check_heuristic_fits(
    task: TaskSpec,
    spec: ControllerSpec,
    run_knobs: HeuristicConfig,
    blueprints: Sequence[str] | None,
    host_width: int | None,
    slots: Sequence[str],
    run_source: str = "--heuristic.",
) -> None:
    """A heuristic controller's `slots` knob names enabled slots, and each blueprint its
    `slot_blueprints` pins fits its slot (and is among `--blueprints`, when given). Without
    `--blueprints`, a width blueprint its order names is its to choose (`heuristic_rotation`):
    each must fit every unpinned slot it may grow in (`--blueprints` was checked itself; other
    controllers never read the order)."""
    if spec.kind != "heuristic":
        return
    knobs = heuristic_knobs(spec, run_knobs)
    prefix = f"heuristic:{spec.path} " if spec.path else run_source
    pinned = check_heuristic_pins(task, knobs, slots, blueprints, host_width, prefix)
    if blueprints is not None:
        return
    rotating = [s for s in knobs.slots or slots if s not in pinned]
    for name in heuristic_rotation(task.topology, knobs.blueprint_order, None):
        check_blueprints_fit(task, host_width, rotating, [name], f"{prefix}blueprint_order {name}")


def heuristic_from_file(path: str, defaults: HeuristicConfig) -> HeuristicConfig:
    """A file's `[heuristic]` table over `defaults`; anything else in the file is an error."""
    _, knobs = split_config(
        read_config_file(path, f"heuristic:{path}"), (), {"heuristic": HeuristicConfig}, f"heuristic:{path}"
    )
    try:
        return defaults.with_knobs(knobs.get("heuristic", {}))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"heuristic:{path}: {exc}") from None


def resolve_eval(args: argparse.Namespace, rest: Sequence[str] = ()) -> EvalRun:
    file_settings, file_knobs = config_file(args, EVAL_DEFAULTS, EVAL_GROUPS)
    settings = merge_settings(EVAL_DEFAULTS, file_settings, args=args)
    task = resolve_task(settings["task"])
    knobs = parse_knobs(EVAL_GROUPS, rest, over_tuned_heuristic(task.name, file_knobs))
    task = knobs["host"].apply(task)
    check_host_builds(task, knobs["host"].width)
    slots = resolve_slots(task, settings["slots"])
    blueprints = resolve_heuristic_blueprints(
        task, knobs["heuristic"], settings["blueprints"], knobs["host"].width, slots
    )
    seeds = parse_seeds(settings["seeds"])
    controllers = resolve_controllers(settings["controllers"], task, seeds, knobs["host"].width, slots)
    run_source = heuristic_knobs_source(args.config, rest)
    for spec in controllers:
        check_heuristic_fits(task, spec, knobs["heuristic"], blueprints, knobs["host"].width, slots, run_source)
    max_epochs = task.max_epochs if settings["max_epochs"] is None else settings["max_epochs"]
    check_minimum("--max-epochs", max_epochs, 1)
    knobs["host"] = knobs["host"].with_episode_warmup(task, max_epochs)
    check_minimum("--max-germinations", settings["max_germinations"], 0)
    workers = (os.cpu_count() or 1) if settings["workers"] is None else settings["workers"]
    check_minimum("--workers", workers, 0)
    if workers > 4 * (os.cpu_count() or 1):
        raise UsageError(f"--workers {workers}: one process per episode; at most {4 * (os.cpu_count() or 1)} here")
    run_dir = (
        Path(args.run_dir) if args.run_dir else Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-eval-{task.name}"
    )
    config = resolved_config("eval", settings, knobs)
    finished: tuple[dict[str, Any], ...] = ()
    if args.resume is not None and args.run_dir is None:
        raise UsageError("--resume last needs --run-dir: the run directory to continue (or to start)")
    policy_hashes = {s.name: policy_sha256(Path(s.path)) for s in controllers if s.kind == "policy"}  # type: ignore[arg-type]
    if args.resume is not None and check_same_run(run_dir, config, frozenset({"workers"})):
        finished = tuple(read_jsonl(run_dir / EPISODES_FILE))
        check_same_policies(finished, policy_hashes, controllers)
    else:
        check_run_dir(run_dir, RUN_FILES)
    load_task_data(task, settings["data_dir"])  # a missing or corrupt dataset fails here, before any episode
    apply_deterministic(settings)
    env = env_config(
        task=task,
        device=resolve_device_arg(settings["device"]),
        max_epochs=max_epochs,
        enabled_slots=slots,
        max_germinations=settings["max_germinations"],
        thresholds=knobs["gates"],
        governor=knobs["governor"],
        host_width=knobs["host"].width,
        lr_warmup_epochs=knobs["host"].lr_warmup_epochs,
    )
    return EvalRun(
        task, env, controllers, seeds, knobs["heuristic"], blueprints, bool(settings["sample"]), settings["data_dir"],
        dataclasses.asdict(knobs["host"]), workers, config, run_dir, finished, policy_hashes,
    )  # fmt: skip


def played_another_policy(row: dict[str, Any], policy_hashes: dict[str, str]) -> bool:
    """An episode's result records a policy other than its controller's in `policy_hashes`: an eval
    that paired it with the others would mix two policies (`policy:shapes` names whatever ships,
    and a checkpoint path can be written again). Episodes saved before Esper recorded the hash,
    and other controllers', are taken as they are."""
    played, expected = row.get("policy_sha256"), policy_hashes.get(row["controller"])
    return played is not None and expected is not None and played != expected


def check_same_policies(
    finished: tuple[dict[str, Any], ...], policy_hashes: dict[str, str], controllers: tuple[ControllerSpec, ...]
) -> None:
    """A resumed eval pairs its saved episodes with new ones, so each policy must be the one they played."""
    paths = {s.name: s.path for s in controllers}
    for row in finished:
        if played_another_policy(row, policy_hashes):
            raise UsageError(
                f"--resume last: {row['controller']}'s file {paths[row['controller']]} is not the one its saved "
                f"episodes played (sha256 {row['policy_sha256'][:12]}... then, "
                f"{policy_hashes[row['controller']][:12]}... now); evaluate it in a new --run-dir"
            )


# --------------------------------------------------------------------------- episodes
@dataclass(frozen=True)
class EpisodeJob:
    """One episode of one controller on one seed, as a worker process receives it (tasks hold
    lambdas, so the worker rebuilds the task from its name and host knobs)."""

    spec: ControllerSpec
    rng_seed: int
    task_name: str
    host_knobs: dict[str, Any]
    env_fields: dict[str, Any]
    """The `EnvConfig` fields other than the task."""
    heuristic: HeuristicConfig
    sample: bool
    data_dir: str | None
    blueprints: tuple[str, ...] | None
    """`--blueprints`: what the heuristic and `random` choose from (None: their own defaults)."""


def episode_jobs(run: EvalRun, specs: list[ControllerSpec], widths: dict[str, int]) -> list[EpisodeJob]:
    """`widths`: the host width of each sized static (`SIZED_STATICS`) among `specs`."""
    fields = {f.name: getattr(run.env, f.name) for f in dataclasses.fields(run.env) if f.name != "task"}
    jobs = []
    for spec in specs:
        env_fields = dict(fields)
        if spec.kind in ("static", *SIZED_STATICS):
            env_fields["max_germinations"] = 0
        if spec.kind in SIZED_STATICS:
            env_fields["host_width"] = widths[spec.kind]
        if spec.kind == "schedule":
            env_fields["thresholds"] = keeping_every_seed(run.env.thresholds)
        for seed in run.seeds:
            job = EpisodeJob(
                spec, seed, run.task.name, run.host_knobs, env_fields, run.heuristic, run.sample, run.data_dir,
                run.blueprints,
            )  # fmt: skip
            jobs.append(job)
    return jobs


@functools.lru_cache(maxsize=2)
def _task_data(task_name: str, host_knobs: tuple, data_dir: str | None):
    return load_task_data(HostTraining(**dict(host_knobs)).apply(get_task(task_name)), data_dir)


def build_controller(job: EpisodeJob, config: EnvConfig) -> Controller:
    return make_controller(job.spec, config, job.heuristic, job.sample, job.rng_seed, job.blueprints)


def make_controller(
    spec: ControllerSpec,
    config: EnvConfig,
    heuristic: HeuristicConfig,
    sample: bool,
    rng_seed: int,
    blueprints: Sequence[str] | None = None,
) -> Controller:
    """The controller `spec` names, for envs of `config` (`eval` and `grow` build theirs here).
    `heuristic`: the knobs a plain `heuristic` runs with; `blueprints`: the `--blueprints` flag,
    what the heuristic (its knobs' order narrowed to them) and `random` choose from (None: all; a
    policy always chooses among the blueprints its run allowed); `sample`: a policy samples
    instead of taking its most probable action."""
    if spec.kind in ("static", *SIZED_STATICS):
        return StaticController()
    if spec.kind == "random":
        return RandomController(
            config.task.topology, config.enabled_slots, blueprints, thresholds=config.thresholds, rng_seed=rng_seed
        )
    if spec.kind in SCHEDULED:
        schedule = naive_slot_schedule(spec.name, spec.path or "", config.enabled_slots)
        return NaiveGrowthController(config.task.topology, schedule, config.thresholds)
    if spec.kind == "heuristic":
        knobs = heuristic_knobs(spec, heuristic)
        return HeuristicController(
            config.task.topology, config.enabled_slots, blueprints, config=knobs, thresholds=config.thresholds
        )
    assert spec.path is not None
    return PolicyController.from_checkpoint(spec.path, greedy=not sample, rng_seed=rng_seed)


def start_worker(deterministic: bool) -> None:
    """A worker process runs the eval's kernels (`--deterministic`) and ignores interrupts."""
    if deterministic:
        use_deterministic_kernels()
    ignore_interrupts()


def ignore_interrupts() -> None:
    """Worker processes leave Ctrl-C and SIGTERM to the main process, which stops the evaluation
    cleanly. Both often reach the whole process group at once (Ctrl-C in a terminal, `timeout`,
    a scheduler ending a job); a worker killed by one broke the pool into a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def run_one(job: EpisodeJob) -> dict[str, Any]:
    """Run one job (in a worker process, with one thread)."""
    torch.set_num_threads(1)
    return episode_result(job)


def episode_env(job: EpisodeJob) -> MorphogeneticEnv:
    """The env a job's episode runs in, as every controller of the eval gets it."""
    task = HostTraining(**job.host_knobs).apply(get_task(job.task_name))
    config = EnvConfig(task=task, **job.env_fields)
    return MorphogeneticEnv(config, _task_data(job.task_name, tuple(sorted(job.host_knobs.items())), job.data_dir))


def episode_result(job: EpisodeJob) -> dict[str, Any]:
    env = episode_env(job)
    controller = build_controller(job, env.config)
    outcome = run_episode(env, controller, rng_seed=job.rng_seed, episode=job.rng_seed)
    policy = controller if isinstance(controller, PolicyController) else None
    diagnostics = policy.diagnostics if policy is not None else None
    digest = policy.policy_sha256 if policy is not None else None
    return {
        "controller": job.spec.name,
        "seed": job.rng_seed,
        "test_accuracy": outcome.final_test_accuracy,
        "test_loss": outcome.final_test_loss,
        "val_accuracy": outcome.final_val_accuracy,
        "host_params": outcome.host_params,
        "seed_params": outcome.seed_params,
        "fossilized": sum(r.final_stage == "FOSSILIZED" for r in outcome.records),
        "culled": sum(r.final_stage == "CULLED" for r in outcome.records),
        "seconds": outcome.seconds,
        "train_gflops": outcome.train_gflops,
        "measure_gflops": outcome.measure_gflops,
        "grown_seeds": [record.to_json() for record in outcome.records],
        "diagnostics": diagnostics.state() if diagnostics else None,
        **({"policy_sha256": digest} if digest is not None else {}),
    }


def run_all(
    run: EvalRun, pool, specs: list[ControllerSpec], widths: dict[str, int], stop: GracefulStop
) -> list[dict[str, Any]]:
    """Every seed of `specs` not finished before, in `pool` (or one by one in this process when
    `pool` is None), each result saved as it completes. After a signal, the episodes running
    are finished and saved, the others not started, and `StopRequested` is raised."""
    held = {(r["controller"], r["seed"]): r for r in run.finished}
    paths = {s.name: s.path for s in specs}
    results = [held[(s.name, seed)] for s in specs for seed in run.seeds if (s.name, seed) in held]
    jobs = [job for job in episode_jobs(run, specs, widths) if (job.spec.name, job.rng_seed) not in held]
    if pool is None:
        done = (episode_result(job) for job in jobs if not stop.signum)
    else:
        done = in_flight(pool, jobs, run.workers, stop)
    with (run.run_dir / EPISODES_FILE).open("a", encoding="utf-8") as record, worker_deaths(run, results):
        for r in done:
            if played_another_policy(r, run.policy_hashes):
                raise RunFailure(
                    f"{r['controller']}'s file {paths[r['controller']]} changed while the eval ran (sha256 "
                    f"{run.policy_hashes[r['controller']][:12]}... at the start, {r['policy_sha256'][:12]}... at "
                    f"seed {r['seed']}); the {len(results)} episodes before it are saved; "
                    "evaluate it in a new --run-dir"
                )
            results.append(r)
            record.write(json.dumps(r, allow_nan=False) + "\n")
            record.flush()
            print(
                f"  {r['controller']} seed {r['seed']}: test {r['test_accuracy']:.2f}%, "
                f"added params {r['seed_params']:,}, {r['seconds']:.0f} s",
                flush=True,
            )
    code = stop.exit_code(SINGLE_PROCESS)
    if code:
        raise StopRequested(
            code,
            f"eval stopped with {len(results)} episodes of this phase saved in {run.run_dir / EPISODES_FILE}; "
            f"continue with the same command and --resume last --run-dir {run.run_dir}",
        )
    return results


def run_sized(
    run: EvalRun, pool, specs: list[ControllerSpec], widths: dict[str, int], stop: GracefulStop
) -> list[dict[str, Any]]:
    """The sized statics' episodes, each width once: a static host of one width and seed is one
    run, so `compute` at `matched`'s width takes `matched`'s episodes (it ran them twice)."""
    first: dict[int, ControllerSpec] = {}
    for spec in specs:
        first.setdefault(widths[spec.kind], spec)
    results = run_all(run, pool, list(first.values()), widths, stop)
    for spec in specs:
        owner = first[widths[spec.kind]]
        if owner is not spec:
            print(f"  {spec.name}: the episodes of {owner.name}, a static host of the same width", flush=True)
            results += [{**r, "controller": spec.name} for r in results if r["controller"] == owner.name]
    return results


def check_held_widths(run: EvalRun, specs: list[ControllerSpec], widths: dict[str, int]) -> None:
    """A held episode of a sized static is taken by (controller, seed) alone: refuse one whose
    host is not of the width this run sizes it at (a run directory assembled or edited by hand),
    rather than report it under that width."""
    for spec in specs:
        width = widths[spec.kind]
        params = run.task.host_params(width)
        for row in run.finished:
            if row["controller"] == spec.name and row["host_params"] != params:
                raise RunFailure(
                    f"{spec.name} seed {row['seed']} in {run.run_dir / EPISODES_FILE} has a host of "
                    f"{row['host_params']:,} parameters, not width {width}'s {params:,}: "
                    "evaluate in a new --run-dir"
                )


def in_flight(pool, jobs: list[EpisodeJob], workers: int, stop: GracefulStop) -> Iterator[dict[str, Any]]:
    """The jobs' results as they complete, with at most `workers` submitted at a time, so that
    after a signal only the episodes running finish: a pool given every job at once starts the
    ones queued for its workers too (5 more episodes ran after a Ctrl-C)."""
    waiting = iter(jobs)
    running = {pool.submit(run_one, job) for job in islice(waiting, workers)}
    while running:
        finished, running = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
        for future in finished:
            yield future.result()
            job = None if stop.signum else next(waiting, None)
            if job is not None:
                running.add(pool.submit(run_one, job))


@contextlib.contextmanager
def worker_deaths(run: EvalRun, results: list[dict[str, Any]]) -> Iterator[None]:
    """A worker process killed from outside (SIGKILL, the out-of-memory killer) breaks the pool:
    one line saying what is saved and how to go on, not the pool's traceback."""
    try:
        yield
    except concurrent.futures.process.BrokenProcessPool:
        raise RunFailure(
            f"a worker process died (killed from outside, or out of memory); the {len(results)} episodes "
            f"of this phase finished before it are saved in {run.run_dir / EPISODES_FILE}; continue with "
            f"the same command and --resume last --run-dir {run.run_dir}"
        ) from None


def width_for_mean_size(task: TaskSpec, rows: list[dict[str, Any]]) -> int:
    """The static width nearest the episodes' mean final parameter count (host plus seeds)."""
    return task.width_for_params(round(statistics.fmean(r["host_params"] + r["seed_params"] for r in rows)))


def sized_widths(run: EvalRun, results: list[dict[str, Any]]) -> dict[str, int]:
    """The host width of each sized static the run compares (`SIZED_STATICS`), from the growing
    controllers' results: `matched` closest to their mean final parameter count, `compute` to
    their mean training FLOPs for a whole run."""
    growing = {s.name for s in run.controllers if s.grows}
    rows = [r for r in results if r["controller"] in growing]
    kinds = {s.kind for s in run.controllers}
    widths: dict[str, int] = {}
    data, target_gflops = None, 0.0
    if "compute" in kinds:
        data = _task_data(run.task.name, tuple(sorted(run.host_knobs.items())), run.data_dir)
        target_gflops = statistics.fmean(r["train_gflops"] for r in rows)
    try:  # these build the task's host at other widths
        if "matched" in kinds:
            widths["matched"] = width_for_mean_size(run.task, rows)
        if data is not None:
            widths["compute"] = width_for_train_gflops(run.task, data, run.env.max_epochs, target_gflops)
    except (TypeError, ValueError) as exc:  # an own task's host factory refused a width
        sized = " and ".join(sorted(kinds & set(SIZED_STATICS)))
        raise RunFailure(
            f"--controllers {sized}: task {run.task.name}'s host cannot be sized by width ({exc}); the "
            f"{len(results)} episodes run are saved in {run.run_dir / EPISODES_FILE}"
        ) from exc
    return widths


# --------------------------------------------------------------------------- report
def comparison(run: EvalRun, results: list[dict[str, Any]], widths: dict[str, int]) -> dict[str, Any]:
    """eval.json: per controller one list entry per seed, in seed order, and the paired differences."""
    by_name: dict[str, dict[str, list]] = {}
    for spec in run.controllers:
        rows = sorted((r for r in results if r["controller"] == spec.name), key=lambda r: r["seed"])
        by_name[spec.name] = {key: [r[key] for r in rows] for key in EPISODE_KEYS}
    test = {name: values["test_accuracy"] for name, values in by_name.items()}
    policies = {s.name for s in run.controllers if s.kind == "policy"}
    return {
        "task": run.task.name,
        "max_epochs": run.env.max_epochs,
        "seeds": list(run.seeds),
        "matched_width": widths.get("matched"),
        "compute_width": widths.get("compute"),
        "nearest_static_width": nearest_static_widths(run, results),
        "controllers": by_name,
        "test_accuracy": {name: estimate(values).to_json() for name, values in test.items()},
        "paired": {f"{a} - {b}": paired_difference(test[a], test[b]).to_json() for a, b in pairs(run.controllers)},
        "diagnostics": {name: policy_diagnostics([r for r in results if r["controller"] == name]) for name in policies},
        "policy_sha256": run.policy_hashes,
    }


def nearest_static_widths(run: EvalRun, results: list[dict[str, Any]]) -> dict[str, int]:
    """Per growing controller, the static width nearest its own mean final parameter count.
    `matched` is one host sized on all the growers' mean: a grower that ends larger than the
    others is paired with a host smaller than itself, and the table says so. An own task whose
    host factory refuses other widths (one shape) has none."""
    widths = {}
    for spec in (s for s in run.controllers if s.grows):
        try:
            widths[spec.name] = width_for_mean_size(run.task, [r for r in results if r["controller"] == spec.name])
        except (TypeError, ValueError):
            return {}
    return widths


def policy_diagnostics(rows: list[dict[str, Any]]) -> dict[str, object]:
    """A learned controller's decisions over every seed: op mix, mean entropy per head, keep/cull
    AUC (`esper.tamiyo.diagnostics`), and each seed's keep/cull decisions in seed order (None for
    an episode saved before Esper recorded them, in a resumed eval)."""
    total = DecisionDiagnostics(HEADS)
    rows = sorted(rows, key=lambda r: r["seed"])
    for r in rows:
        total.absorb(r["diagnostics"])
    return {**total.to_json(), "keep_cull_decisions": [r["diagnostics"].get("keep_cull_decisions") for r in rows]}


def pairs(specs: tuple[ControllerSpec, ...]) -> list[tuple[str, str]]:
    """Each controller against each baseline listed before it, and every non-baseline against
    every baseline (a learned controller against static, matched, heuristic and random)."""
    baselines = [s for s in specs if s.kind in BASELINES]
    others = [s for s in specs if s.kind not in BASELINES]
    found = [(b.name, a.name) for a, b in combinations(baselines, 2)]
    found += [(o.name, b.name) for o in others for b in baselines]
    found += [(b.name, a.name) for a, b in combinations(others, 2)]
    return found


def interval_text(ci95: list[float | None], spec: str) -> str:
    """`[low, high]`; one seed has none (null in eval.json), shown as such in the column's width."""
    low, high = ci95
    if low is None or high is None:
        return f"{'(one seed)':^16}"
    return f"[{low:{spec}}, {high:{spec}}]"


def table(report: dict[str, Any]) -> str:
    n = len(report["seeds"])
    width = max(28, *(len(name) for name in report["controllers"]))  # a policy's path can be long
    lines = [
        f"{'controller':<{width}} {'test accuracy % (95% CI)':>28} {'added params':>13} "
        f"{'train GFLOPs':>13} {'s / episode':>12}"
    ]
    for name, values in report["controllers"].items():
        est = report["test_accuracy"][name]
        lines.append(
            f"{name:<{width}} {est['mean']:>10.2f} {interval_text(est['ci95'], '6.2f')}    "
            f"{added_params(report, name):>13,.0f} {statistics.fmean(values['train_gflops']):>13,.0f} "
            f"{statistics.fmean(values['seconds']):>12.1f}"
        )
    matched, nearest = report.get("matched_width"), report.get("nearest_static_width", {})
    apart = [f"{name} nearest width {w}" for name, w in nearest.items() if matched is not None and w != matched]
    if apart:
        lines.append(
            f"matched (width {matched}) is sized on the growers' mean final size; by its own: " + ", ".join(apart)
        )
    if report["paired"]:  # one controller alone has nothing to be paired with
        lines.append(f"\npaired test accuracy difference, points (95% CI over {n} seed{'s' if n != 1 else ''}):")
    pair_width = max([48, *(len(pair) for pair in report["paired"])])
    for pair, est in report["paired"].items():
        lines.append(f"{pair:<{pair_width}} {est['mean']:+7.2f} {interval_text(est['ci95'], '+6.2f')}")
    for name, d in report["diagnostics"].items():
        mix = " ".join(f"{op} {share:.2f}" for op, share in d["op_mix"].items())
        entropy = " ".join(f"{head} {value:.2f}" for head, value in d["entropy"].items())
        kc = d["keep_cull"]
        auc = "undefined" if kc["auc"] is None else f"{kc['auc']:.3f}"
        lines.append(
            f"\n{name}: {d['decisions']} decisions; op mix {mix}; entropy {entropy}; "
            f"keep/cull AUC {auc} ({kc['helpful']} helpful, {kc['harmful']} harmful probationary decisions)"
        )
    return "\n".join(lines)


def run_eval(run: EvalRun) -> dict[str, Any]:
    run.run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run.run_dir / "config.json", run.config)
    first = [s for s in run.controllers if s.kind not in SIZED_STATICS]
    print(
        f"esper eval: task {run.task.name}, {len(run.controllers)} controller(s) x {len(run.seeds)} seeds "
        f"({run.seeds[0]}..{run.seeds[-1]}) x {run.env.max_epochs} epochs, {run.workers} worker(s), "
        f"run dir {run.run_dir}",
        flush=True,
    )
    if run.finished:
        print(f"resuming: {len(run.finished)} episode(s) already in {run.run_dir / EPISODES_FILE}", flush=True)
    context = multiprocessing.get_context("spawn")
    workers = (
        concurrent.futures.ProcessPoolExecutor(
            run.workers,
            mp_context=context,
            initializer=start_worker,
            initargs=(bool(run.config["settings"].get("deterministic")),),
        )
        if run.workers
        else None
    )
    with workers or contextlib.nullcontext() as pool, GracefulStop("the episodes running are finished") as stop:
        results = run_all(run, pool, first, {}, stop)
        widths = sized_widths(run, results)
        for kind, width in widths.items():
            print(f"  {kind}: a static host of width {width} (default {run.task.host_width})", flush=True)
        sized = [s for s in run.controllers if s.kind in SIZED_STATICS]
        if sized:
            check_held_widths(run, sized, widths)
            results += run_sized(run, pool, sized, widths, stop)
    report = comparison(run, results, widths)
    report.update(torch_build())
    write_json_atomic(run.run_dir / "eval.json", report)
    board = TelemetryHub([TensorBoardBackend(run.run_dir / "tensorboard", run.config)])
    for name, lists in report["controllers"].items():
        for i, seed in enumerate(report["seeds"]):
            values = {k: lists[k][i] for k in ("test_accuracy", "val_accuracy", "seed_params", "train_gflops")}
            board.emit(Event(EVAL_RESULT, seed, 0, {"controller": name, **values}))
    board.close()
    print(table(report))
    print(f"eval.json in {run.run_dir}", flush=True)
    return report
