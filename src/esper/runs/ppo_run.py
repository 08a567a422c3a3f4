"""The run of `esper ppo` (`esper.runs.ppo`): learn a controller with PPO over vectorized envs.

The run directory holds `metrics.jsonl` (one row per round), `summary.json`, `events.jsonl`
(every env's lifecycle and epoch events) and `checkpoints/round-NNNN.pt`. `--resume` takes its
settings from the checkpoint; flags given explicitly override them, and a checkpoint whose
observation layout or action space differs from what those settings build is refused.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from esper.karn import write_json_atomic, write_torch_atomic
from esper.karn.rundir import read_jsonl
from esper.kasmina.blueprints import blueprint_names
from esper.leyline import GateThresholds
from esper.nissa import ROUND_METRICS, Event, TelemetryHub
from esper.runs.common import (
    AlreadyFinished,
    RunFailure,
    UsageError,
    a_run_of,
    apply_deterministic,
    check_blueprints_fit,
    check_heuristic_pins,
    check_host_builds,
    check_minimum,
    check_run_dir,
    env_config,
    heuristic_knobs_source,
    legacy_knobs,
    load_task_data,
    progress_bar,
    resolve_blueprints,
    resolve_device_arg,
    resolve_slots,
    resolve_task,
    run_telemetry,
    torch_build,
    tracking_project,
)
from esper.runs.config import (
    PPO_GROUPS,
    config_file,
    jsonable,
    merge_settings,
    over_tuned_heuristic,
    parse_knobs,
    resolved_config,
)
from esper.runs.stopping import GracefulStop, StopRequested
from esper.simic import CheckpointError
from esper.simic.checkpoint import (
    POLICY_KEYS,
    check_compatible,
    check_resumable,
    checkpoint_path,
    checkpoint_payload,
    later_checkpoints,
    latest_checkpoint,
    load_learner_state,
    read_checkpoint,
    save_checkpoint,
)
from esper.simic.cloning import CLONE_TEACHERS, CLONED_DECISIONS, NothingToClone, SignCulls, clone, demonstrate
from esper.simic.controller import PolicyController
from esper.simic.distributed import SINGLE_PROCESS, DistContext, init_distributed
from esper.simic.loop import Learner
from esper.simic.morphogenetic_envs import MorphogeneticEnvs, TrainerConfig, build_trainer, run_round
from esper.tamiyo import HeuristicController, PolicySpaces, trained_policy_path
from esper.tamiyo.heuristic import heuristic_rotation
from esper.tolaria import DEFAULT_TASK, EnvConfig, TaskSpec
from esper.tolaria.datasets import TaskData
from esper.tolaria.episode import Controller
from esper.tolaria.training import PRECISIONS

RUN_FILES = ("metrics.jsonl", "summary.json", "events.jsonl", "checkpoints", "config.json", "grown", "tensorboard")
MAX_RNG_SEED = 2**62
"""Below the torch generator bound that `heuristic`, `grow` and `eval` use (2**63 - 1): each rank's
generators start `RANK_SEED_STRIDE * rank` above the run's seed (`esper.simic.loop`), and the
2**62 left above this bound are room for more ranks than any job has."""

DEFAULTS: dict[str, Any] = {
    "task": DEFAULT_TASK,
    "episodes": 8,
    "n_envs": 4,
    "max_epochs": None,  # the task's
    "slots": None,  # all of the host's
    "max_germinations": 6,
    "blueprints": None,  # all of the topology's
    "hidden": 128,
    "observe_budget": False,
    "device": "cpu",
    "devices": None,  # --device
    "seed": 0,
    "save_every": 1,
    "data_dir": None,
    "amp": None,
    "compile": False,
    "cuda_graphs": True,
    "deterministic": None,  # off; None, not False, so a checkpoint saved before the flag resumes
    "clone_episodes": 0,
    "clone_steps": 300,
    "clone_lr": 1e-3,
    "clone_decisions": "all",
    "clone_teacher": "heuristic",
    "clone_anchor": 0.0,
    "init_policy": None,
}
"""Settings of a new run, as given (None: derived from the task). A resumed run takes them from
its checkpoint instead, so a default stays a default if the task changes; a config file's
top-level keys may set them too."""

SETTINGS = tuple(DEFAULTS)


@dataclass
class PPORun:
    settings: dict[str, Any]
    task: TaskSpec
    data: TaskData
    env: EnvConfig
    devices: list[torch.device]
    policy_device: torch.device
    config: TrainerConfig
    blueprints: tuple[str, ...]
    knobs: dict[str, Any]
    run_dir: Path
    resume: dict[str, Any] | None
    resume_path: Path | None
    quiet: bool
    ctx: DistContext = SINGLE_PROCESS
    """This process's rank under `torchrun`: only rank 0 writes and prints."""
    wandb_project: str | None = None
    """`--track`: the W&B project rank 0 logs to (not a setting: a resumed run tracks only if asked)."""
    set_aside: tuple[Path, ...] = ()
    """Checkpoints newer than the one resumed that did not read as complete: renamed `*.corrupt`."""
    restart_in_place: bool = False
    """`--resume last` (or a run directory) found no checkpoint: start fresh in that directory,
    dropping the telemetry of any earlier start that never reached one."""
    clone_now: bool = False
    """Clone before PPO: a new run with `--clone-episodes` > 0, or a checkpoint resumed into a
    new run directory with `--clone-episodes` given. A run resumed in its own directory never
    clones again, so a command repeated after a crash (`--resume last`) is safe."""
    clonings: list[dict[str, Any]] = field(default_factory=list)
    """Every cloning the run's policy has had, oldest first (carried by its checkpoints)."""
    init_policy: dict[str, Any] | None = None
    """`--init-policy`: the policy file a new run starts from (None when resumed: the checkpoint
    holds the learner)."""


# --------------------------------------------------------------------------- resolving arguments
def resolve_ppo(args: argparse.Namespace, rest: Sequence[str] = (), ctx: DistContext = SINGLE_PROCESS) -> PPORun:
    """Validate every setting, knob (and the checkpoint) before anything is written."""
    resume_path, skipped, folder = resolve_resume_path(args.resume, args.run_dir)
    resume = read_resume(resume_path) if resume_path is not None else None
    settings, knobs = resolve_settings_and_knobs(args, rest, resume)
    check_not_finished(folder, resume, settings["episodes"])
    task = knobs["host"].apply(resolve_task(settings["task"]))
    check_counts(settings)
    max_epochs = settings["max_epochs"] or task.max_epochs
    check_minimum("--max-epochs", max_epochs, 1)
    knobs["host"] = knobs["host"].with_episode_warmup(task, max_epochs)
    policy_device, devices = resolve_devices(settings, ctx)
    amp = resolve_amp(settings["amp"], devices)
    check_host_builds(task, knobs["host"].width)
    slots = resolve_slots(task, settings["slots"])
    blueprints = policy_blueprints(task, settings["blueprints"])
    check_blueprints_fit(task, knobs["host"].width, slots, blueprints)
    check_teacher_pins(task, knobs, slots, blueprints, heuristic_knobs_source(args.config, rest))
    config = trainer_config(settings, knobs)
    spaces = policy_spaces(task, blueprints, config.observe_budget, knobs["gates"])
    init_policy = resolve_init_policy(settings, resume, task, spaces)
    if resume is not None:
        # A run directory whose last checkpoint is its last round but which has no summary (killed
        # in between; `check_not_finished` passed) is resumed to write it; a checkpoint file is not.
        try:
            check_resumable(resume_path, resume, settings["episodes"], spaces, finished_ok=folder is not None)  # type: ignore[arg-type]
        except CheckpointError as exc:
            raise UsageError(str(exc)) from None
    set_aside = tuple(path for path, _ in skipped)
    restart_in_place = folder is not None and resume is None
    if restart_in_place:
        check_restartable(folder)  # type: ignore[arg-type]
    if folder is not None:  # a run directory resumed (or started) in place
        run_dir = folder
        if resume is not None:
            check_no_later_checkpoints(run_dir, resume, resume_path, set_aside)  # type: ignore[arg-type]
            if int(resume["learner"]["episodes_done"]) == settings["episodes"]:
                last_metrics_row(run_dir)  # the summary still to write is made from it
    else:
        run_dir = resolve_run_dir(args.run_dir, task, resume, resume_path)
    branched = (  # a checkpoint resumed into a new run directory
        resume is not None
        and folder is None
        and run_dir.resolve() != run_dir_of_checkpoint(resume_path, resume).resolve()  # type: ignore[arg-type]
    )
    data = load_task_data(task, settings["data_dir"])
    env = env_config(
        task=task, device=devices[0], max_epochs=max_epochs, enabled_slots=slots,
        max_germinations=settings["max_germinations"], thresholds=knobs["gates"], governor=knobs["governor"],
        amp=amp, compile_backend="inductor" if settings["compile"] else None, cuda_graphs=settings["cuda_graphs"],
        host_width=knobs["host"].width, lr_warmup_epochs=knobs["host"].lr_warmup_epochs,
    )  # fmt: skip
    clone_flag = getattr(args, "clone_episodes", None)  # given on this command line (a Python call: a setting)
    return PPORun(
        settings, task, data, env, devices, policy_device, config, blueprints, knobs, run_dir, resume, resume_path,
        args.quiet, ctx, tracking_project(args), set_aside, restart_in_place,
        clone_now=settings["clone_episodes"] > 0 and (resume is None or (branched and clone_flag is not None)),
        clonings=past_clonings(resume or init_policy),
        init_policy=init_policy,
    )  # fmt: skip


def check_teacher_pins(
    task: TaskSpec, knobs: dict[str, Any], slots: Sequence[str], blueprints: tuple[str, ...], source: str
) -> None:
    """The cloning teacher's slot pins fit the run, checked before anything is written; `source`
    is where they came from (a flag or the `--config` file), for the error."""
    check_heuristic_pins(task, knobs["heuristic"], slots, blueprints, knobs["host"].width, source)


def policy_spaces(
    task: TaskSpec, blueprints: tuple[str, ...], observe_budget: bool, gates: GateThresholds
) -> dict[str, Any]:
    """The signature of the spaces the run's policy is shaped for; a budget to observe must be set."""
    if observe_budget and gates.compute_budget is None:
        raise UsageError("--observe-budget needs a compute budget to observe: pass --gates.compute_budget B")
    return PolicySpaces.derive(task.topology, task.slot_names, blueprints, observe_budget).signature()


def policy_blueprints(task: TaskSpec, given: Sequence[str] | None) -> tuple[str, ...]:
    """`--blueprints`: the blueprints the learned policy may choose. The default is the residual
    ones (the head of every earlier policy); width blueprints named here join its blueprint head
    and its observation."""
    return resolve_blueprints(task, given, blueprint_names(task.topology))


def resolve_init_policy(
    settings: dict[str, Any], resume: dict[str, Any] | None, task: TaskSpec, spaces: dict[str, Any]
) -> dict[str, Any] | None:
    """The policy a new run starts from (`--init-policy`); a resumed run goes on from its own."""
    if resume is not None and settings["init_policy"] != resume["settings"].get("init_policy"):
        raise UsageError(
            f"--init-policy {settings['init_policy']}: a resumed run goes on from its checkpoint's policy; "
            "--init-policy starts a new run"
        )
    if resume is None and settings["init_policy"] is not None:
        return read_init_policy(settings["init_policy"], task.name, settings["hidden"], spaces)
    return None


def read_init_policy(name: str, task: str, hidden: int, spaces: dict[str, Any]) -> dict[str, Any]:
    """The `--init-policy` file (a shipped policy's name or a path), read as acting reads it, and
    checked to fit the run: its task, its network's width and this run's spaces."""
    path = trained_policy_path(name) or Path(name)
    try:
        payload = read_checkpoint(path, POLICY_KEYS)
        check_compatible(path, payload["spaces"], spaces)
    except CheckpointError as exc:
        raise UsageError(f"--init-policy: {exc}") from None
    if payload["settings"]["task"] != task:
        trained_on = payload["settings"]["task"]
        raise UsageError(f"--init-policy {name}: the policy was trained on task {trained_on!r}, not {task!r}")
    if int(payload["trainer"]["hidden"]) != hidden:
        raise UsageError(
            f"--init-policy {name}: the policy has --hidden {payload['trainer']['hidden']}, this run {hidden}; "
            f"pass --hidden {payload['trainer']['hidden']}"
        )
    return payload


def past_clonings(resume: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The clonings a resumed checkpoint records; one from before Esper recorded them had at most
    its warm start, which its settings describe."""
    if resume is None:
        return []
    if "clonings" in resume:
        return list(resume["clonings"])
    s = resume["settings"]
    if not s.get("clone_episodes"):
        return []
    teacher = resume["knobs"].get("heuristic", "the task's tuned heuristic")
    first = {"before_episode": 0, "episodes": s["clone_episodes"], "decisions": "all", "teacher": teacher}
    return [{**first, "steps": s["clone_steps"], "lr": s["clone_lr"]}]


def resolve_settings_and_knobs(
    args: argparse.Namespace, rest: Sequence[str], resume: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Settings and knobs, each layered: defaults < the checkpoint's < the file's < the flags."""
    file_settings, file_knobs = config_file(args, DEFAULTS, PPO_GROUPS)
    settings = merge_settings(DEFAULTS, resume["settings"] if resume else {}, file_settings, args=args)
    saved = legacy_knobs(resume["knobs"]) if resume else {}
    layered = {g: {**saved.get(g, {}), **file_knobs.get(g, {})} for g in PPO_GROUPS}
    knobs = parse_knobs(PPO_GROUPS, rest, over_tuned_heuristic(resolve_task(settings["task"]).name, layered))
    return settings, knobs


def trainer_config(settings: dict[str, Any], knobs: dict[str, Any]) -> TrainerConfig:
    try:
        return TrainerConfig(
            episodes=settings["episodes"],
            n_envs=settings["n_envs"],
            rng_seed=settings["seed"],
            hidden=settings["hidden"],
            observe_budget=bool(settings["observe_budget"]),
            reward=knobs["reward"],
            ppo=knobs["ppo"],
        )
    except ValueError as exc:  # the reward's gamma must be PPO's
        raise UsageError(str(exc)) from None


def resolve_resume_path(
    flag: str | None, run_dir: str | None
) -> tuple[Path | None, list[tuple[Path, str]], Path | None]:
    """The checkpoint `--resume` names: a file as given; for a run directory (or `last`, meaning
    `--run-dir`) its latest complete checkpoint, or None to start fresh when it has none. Also
    the newer checkpoints that did not read as complete (to be set aside), and the run directory
    when one was named (the run continues there)."""
    if flag is None:
        return None, [], None
    if flag == "last":
        if run_dir is None:
            raise UsageError("--resume last needs --run-dir: the run directory to continue (or to start)")
        folder = Path(run_dir)
    elif Path(flag).is_dir():
        folder = Path(flag)
    else:
        return Path(flag), [], None
    latest, skipped = latest_checkpoint(folder)
    for i, (_, reason) in enumerate(skipped):
        before = "resuming from the checkpoint before it"
        if latest is None and i == len(skipped) - 1:
            before = "no complete checkpoint is left, so the run starts afresh (damaged ones are kept as *.corrupt)"
        print(f"esper: warning: {reason}; {before}", file=sys.stderr)
    return latest, skipped, folder


FOREIGN_RUN_FILES = ("summary.json", "eval.json", "episodes.jsonl", "episodes")
"""Files a PPO run that never reached its first checkpoint does not hold: a finished run's, or
another command's (`heuristic`, `grow`, `eval`)."""


def check_restartable(folder: Path) -> None:
    """`--resume last` found no checkpoint in `folder`, so the run starts fresh there, which
    drops the telemetry of an earlier start. Only a PPO run that never reached a checkpoint may
    be restarted so; any other run in the folder is refused, with nothing written."""
    foreign = [name for name in FOREIGN_RUN_FILES if (folder / name).exists()]
    config = folder / "config.json"
    if not foreign and config.is_file():
        try:
            settings = json.loads(config.read_text(encoding="utf-8")).get("settings", {})
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            settings = {}
        if "clone_episodes" not in settings:
            foreign = ["config.json"]
    if foreign:
        raise UsageError(
            f"--resume last: {str(folder)!r} holds no ppo checkpoint to continue, but {a_run_of(folder, 'ppo')} "
            f"that a fresh start would overwrite ({', '.join(foreign)}); choose a new --run-dir"
        )


def check_not_finished(folder: Path | None, resume: dict[str, Any] | None, episodes: int) -> None:
    """`AlreadyFinished` for a run directory resumed after it completed (its summary written).
    Checked before anything specific to this machine (devices), so every rank of a torchrun job
    takes this path together, and a finished GPU run repeated on a CPU box says so."""
    if folder is None or resume is None or not (folder / "summary.json").exists():
        return
    done = int(resume["learner"]["episodes_done"])
    if done >= episodes:
        raise AlreadyFinished(folder, done, episodes)


def read_resume(path: Path) -> dict[str, Any]:
    try:
        return read_checkpoint(path)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None


def check_counts(settings: dict[str, Any]) -> None:
    check_minimum("--episodes", settings["episodes"], 1)
    check_minimum("--n-envs", settings["n_envs"], 1)
    check_minimum("--seed", settings["seed"], 0)
    seeds_used = settings["episodes"] + settings["clone_episodes"]
    if settings["seed"] + seeds_used > MAX_RNG_SEED:
        raise UsageError(f"--seed must be < {MAX_RNG_SEED - seeds_used}, got {settings['seed']}")
    check_minimum("--max-germinations", settings["max_germinations"], 0)
    check_minimum("--save-every", settings["save_every"], 1)
    check_minimum("--hidden", settings["hidden"], 1)
    check_minimum("--clone-episodes", settings["clone_episodes"], 0)
    check_minimum("--clone-steps", settings["clone_steps"], 1)
    if not settings["clone_lr"] > 0:
        raise UsageError(f"--clone-lr must be > 0, got {settings['clone_lr']}")
    if settings["clone_decisions"] not in CLONED_DECISIONS:
        choices = " ".join(CLONED_DECISIONS)
        raise UsageError(f"--clone-decisions: unknown value {settings['clone_decisions']!r}; choose from: {choices}")
    if not 0 <= settings["clone_anchor"] < float("inf"):
        raise UsageError(f"--clone-anchor must be a number >= 0, got {settings['clone_anchor']}")
    if settings["clone_anchor"] > 0 and settings["clone_decisions"] != "cull":
        raise UsageError(
            f"--clone-anchor {settings['clone_anchor']} needs --clone-decisions cull, "
            f"got {settings['clone_decisions']!r}"
        )
    if settings["clone_teacher"] not in CLONE_TEACHERS:
        choices = " ".join(CLONE_TEACHERS)
        raise UsageError(f"--clone-teacher: unknown value {settings['clone_teacher']!r}; choose from: {choices}")


def resolve_devices(settings: dict[str, Any], ctx: DistContext) -> tuple[torch.device, list[torch.device]]:
    """The policy's device and the envs' devices. Under `torchrun` a CUDA `--device` means each
    rank's own GPU (`cuda:LOCAL_RANK`)."""
    apply_deterministic(settings)
    policy_device = resolve_device_arg(settings["device"])
    if ctx.enabled and policy_device.type == "cuda":
        policy_device = resolve_device_arg(f"cuda:{ctx.local_rank}")
    devices = [resolve_device_arg(d) for d in settings["devices"]] if settings["devices"] else [policy_device]
    if len(devices) > settings["n_envs"]:
        raise UsageError(
            f"--devices names {len(devices)} devices but --n-envs is {settings['n_envs']}: every device needs an env"
        )
    return policy_device, devices


def resolve_amp(amp: str | None, devices: list[torch.device]) -> str | None:
    if amp is None:
        return None
    if amp not in PRECISIONS:
        raise UsageError(f"unknown --amp precision {amp!r}; choose from: {' '.join(PRECISIONS)}")
    not_cuda = sorted({str(d) for d in devices if d.type != "cuda"})
    if not_cuda:
        raise UsageError(
            f"--amp {amp} is for CUDA hosts; the envs would run on {' '.join(not_cuda)} (drop --amp or use CUDA)"
        )
    return amp


def resolve_run_dir(flag: str | None, task: TaskSpec, resume: dict | None, resume_path: Path | None) -> Path:
    """A new run needs a new directory. A resumed run continues in its own by default, as long
    as no checkpoint of a later round would be overwritten."""
    if resume is None or resume_path is None:
        run_dir = Path(flag) if flag else Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-ppo-{task.name}"
        check_run_dir(run_dir, RUN_FILES)
        return run_dir
    own = run_dir_of_checkpoint(resume_path, resume)
    run_dir = Path(flag) if flag else own
    if run_dir.resolve() == own.resolve():
        check_no_later_checkpoints(run_dir, resume, resume_path)
    else:
        check_run_dir(run_dir, RUN_FILES)
    return run_dir


def run_dir_of_checkpoint(resume_path: Path, resume: dict) -> Path:
    """The run directory a checkpoint file belongs to: the one holding it (`R/checkpoints/`), so
    that resuming a copied or moved run continues in the copy, never in the folder it was first
    written to; the recorded `run_dir` only for a checkpoint kept outside any run directory."""
    holder = resume_path.parent.parent
    if resume_path.parent.name == "checkpoints" and (holder / "config.json").is_file():
        return holder
    return Path(resume["run_dir"])


def check_no_later_checkpoints(
    run_dir: Path, resume: dict, resume_path: Path, set_aside: tuple[Path, ...] = ()
) -> None:
    """Resuming must not overwrite a checkpoint of a later round (damaged ones set aside do not count)."""
    round_done = int(resume["learner"]["round"])
    skipped = {path.name for path in set_aside}
    later = [name for name in later_checkpoints(run_dir, round_done) if name not in skipped]
    if later:
        raise UsageError(
            f"{str(resume_path)!r} is from round {round_done}, but {str(run_dir)!r} already holds later checkpoints "
            f"({', '.join(later)}); resume from the latest one, or pass a new --run-dir"
        )


# --------------------------------------------------------------------------- running
def build(run: PPORun, emit) -> tuple[MorphogeneticEnvs, Learner]:
    """Envs, spaces and learner of this rank; a resumed learner takes the checkpoint's state."""
    envs, learner = build_trainer(
        run.config, run.env, run.data, run.devices, run.policy_device, run.blueprints, run.ctx, emit
    )
    start = run.resume or run.init_policy
    if run.resume is not None:
        load_learner_state(learner, run.resume["learner"], run.ctx)
    elif run.init_policy is not None:
        learner.policy.load_state_dict(run.init_policy["learner"]["policy"])
        learner.obs_norm.load_state_dict(run.init_policy["learner"]["obs_norm"])
    if start is not None:
        envs.trained_rng_seeds = [int(seed) for seed in start["training_seeds"]]
    return envs, learner


def warm_start(run: PPORun, envs: MorphogeneticEnvs, learner: Learner, quiet: bool) -> None:
    """Clone a teacher (`--clone-teacher`: the heuristic of the run's knobs, the task's tuned one
    unless `--heuristic.KNOB` says otherwise, or `SignCulls` around the run's policy as it starts;
    `esper.simic.cloning`) from its episodes on the seeds after the run's own and after every
    seed it trained on already (recorded as training seeds). Every rank clones the same
    episodes, so the ranks' policies stay equal with no communication."""
    n, decisions = run.settings["clone_episodes"], run.settings["clone_decisions"]
    first = max([run.config.rng_seed + run.config.episodes, *(seed + 1 for seed in envs.trained_rng_seeds)])
    first_episode = first - run.config.rng_seed  # a demonstration's episode number is its seed's, as in PPO
    teacher_name, teacher, teacher_record = cloning_teacher(run, envs, learner)
    if (narrowed := narrowed_teacher(teacher)) and not quiet:
        print(f"warm start: {narrowed}", file=sys.stderr, flush=True)
    demos = []
    for i in range(n):
        demos.append(demonstrate(envs.all_envs[0], teacher, envs.spaces, envs.reward, first + i, first_episode + i))
        if not quiet:
            print(
                f"warm start: {teacher_name} episode {i + 1}/{n} (seed {first + i}) recorded",
                file=sys.stderr,
                flush=True,
            )
    try:
        before, after = clone(
            learner,
            demos,
            run.settings["clone_steps"],
            run.settings["clone_lr"],
            decisions=decisions,
            anchor_coef=run.settings["clone_anchor"],
        )
    except NothingToClone as exc:
        raise RunFailure(
            f"--clone-decisions {decisions}: {exc}; longer episodes (--max-epochs) or more of them "
            "(--clone-episodes) give seeds the time to reach probation"
        ) from None
    envs.trained_rng_seeds.extend(range(first, first + n))
    run.clonings.append(
        {
            "before_episode": learner.episodes_done,
            "episodes": n,
            "seeds": [first, first + n - 1],
            "decisions": decisions,
            "steps": run.settings["clone_steps"],
            "lr": run.settings["clone_lr"],
            "anchor": run.settings["clone_anchor"],
            "teacher": teacher_record,
            "agreement": [before.agreement, after.agreement],
        }
    )
    if not quiet:
        which = "" if decisions == "all" else f", their {after.cloned_steps} {decisions} decisions"
        print(
            f"warm start: cloned {n} {teacher_name} episodes (seeds {first}..{first + n - 1}){which}: greedy agreement "
            f"{before.agreement:.2f} -> {after.agreement:.2f}, action NLL {before.action_nll:.3f} -> "
            f"{after.action_nll:.3f}",
            flush=True,
        )


def narrowed_teacher(teacher: Controller) -> str | None:
    """Which blueprints of a heuristic teacher's order (its knobs', else the default one) the
    policy's blueprints leave out, and what it grows instead, or None. A policy cloned from it
    never sees those: the run says so."""
    if not isinstance(teacher, HeuristicController):
        return None
    order = heuristic_rotation(teacher.topology, teacher.config.blueprint_order, None)
    left_out = [b for b in order if b not in teacher.rotation]
    if not left_out:
        return None
    grows = ", ".join(teacher.rotation)
    return (
        f"the policy's blueprints (--blueprints; default: the residual ones) leave out {', '.join(left_out)} "
        f"of the heuristic's blueprint_order; the teacher grows {grows}"
    )


SIGN_CULLS_TEACHER = (
    "sign-culls: the run's policy as the cloning began, greedy, culling a probationary seed iff its contribution <= 0"
)
"""How a run's `clonings` record names a `SignCulls` teacher (a heuristic teacher is its knobs)."""


def cloning_teacher(run: PPORun, envs: MorphogeneticEnvs, learner: Learner) -> tuple[str, Controller, Any]:
    """The demonstrator `--clone-teacher` names: its name, itself, and how `clonings` records it
    (a heuristic by its knobs, `SIGN_CULLS_TEACHER`). A `SignCulls` teacher acts with a copy of the
    policy as the cloning begins, on the CPU where a `PolicyController` keeps its LSTM state and
    in eval mode, so the learner's own policy is left on its device and in its mode."""
    if run.settings["clone_teacher"] == "heuristic":
        heuristic = HeuristicController(
            run.task.topology,
            run.env.enabled_slots,
            envs.spaces.actions.allowed_blueprints,
            run.knobs["heuristic"],
            run.env.thresholds,
        )
        return "heuristic", heuristic, jsonable(run.knobs["heuristic"])
    policy = copy.deepcopy(learner.policy).cpu()
    controller = PolicyController(policy, envs.spaces, learner.obs_norm, run.env.thresholds)
    return "sign-culls", SignCulls(controller), SIGN_CULLS_TEACHER


def envs_per_device(envs: list) -> str:
    counts: dict[str, int] = {}
    for env in envs:
        counts[str(env.config.device)] = counts.get(str(env.config.device), 0) + 1
    return ", ".join(f"{n} on {device}" for device, n in counts.items())


def metrics_rows_before(path: Path, round_done: int) -> list[str]:
    """The rows of rounds up to `round_done` (a resumed run rewrites what came after); a line a
    kill cut short is dropped with them."""
    return [json.dumps(row) for row in read_jsonl(path) if row["round"] <= round_done]


def run_ppo(run: PPORun) -> dict[str, Any]:
    """Train to `--episodes`. Under `torchrun` every rank runs this; rank 0 alone writes the run
    directory and prints, and the others call the same collectives (metrics, checkpoints)."""
    main_rank = run.ctx.is_main
    if main_rank:
        prepare_run_dir(run)
    config = resolved_config("ppo", run.settings, run.knobs)
    if main_rank:
        hub = run_telemetry(run.run_dir, config, console=False, rounds=True, wandb_project=run.wandb_project)
    else:
        hub = TelemetryHub([])
    quiet = run.quiet or not main_rank
    started = time.perf_counter()
    stop_code = 0
    try:
        envs, learner = build(run, hub.emit)
        if run.clone_now:
            warm_start(run, envs, learner, quiet)
        remaining = run.config.episodes - learner.episodes_done
        if main_rank:
            print(start_line(run, envs, learner, remaining), flush=True)
        last_row = last_metrics_row(run.run_dir) if remaining == 0 else {}
        total = remaining * run.env.max_epochs
        bar = progress_bar(total, "step", quiet)
        with bar, GracefulStop("this round is finished and checkpointed") as stop:
            while learner.episodes_done < run.config.episodes and not stop_code:
                last_row = run_round(envs, learner, on_step=lambda n: bar.update(n * run.ctx.world_size))
                stop_code = stop.exit_code(run.ctx)
                record_round(run, envs, learner, last_row, hub, force_save=bool(stop_code))
                if not quiet:
                    tqdm.write(round_line(run, learner, last_row))
    finally:
        hub.close()
    if stop_code and learner.episodes_done < run.config.episodes:
        raise StopRequested(
            stop_code,
            f"stopped after round {learner.round} ({learner.episodes_done} of {run.config.episodes} episodes), "
            f"checkpointed; continue with: esper ppo --resume last --run-dir {run.run_dir}",
        )
    if not main_rank:
        return {}
    summary = run_summary(run, envs, learner, last_row, time.perf_counter() - started)
    write_json_atomic(run.run_dir / "summary.json", summary)
    print(
        f"done: {learner.round} rounds, {learner.episodes_done} episodes; last round return "
        f"{last_row['charts/episodic_return']:+.3f}, test accuracy {last_row['charts/final_test_accuracy']:.2f}% "
        f"(val {last_row['charts/final_val_accuracy']:.2f}%); "
        f"summary in {run.run_dir / 'summary.json'}; curves: tensorboard --logdir {run.run_dir}",
        flush=True,
    )
    return summary


def last_metrics_row(run_dir: Path) -> dict[str, float]:
    """The resumed checkpoint's round row (`prepare_run_dir` kept none after it): the summary's,
    should no round be left to run."""
    kept = read_jsonl(run_dir / "metrics.jsonl")
    if not kept:
        raise UsageError(f"{str(run_dir / 'metrics.jsonl')!r} has no rows: the summary of the run is written from them")
    return kept[-1]


def prepare_run_dir(run: PPORun) -> None:
    """Create the run directory; a resumed run drops the metrics rows after its checkpoint, and
    a run restarted in place (no checkpoint to resume) drops an earlier start's telemetry."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    for path in run.set_aside:
        path.rename(path.with_name(path.name + ".corrupt"))
    if run.restart_in_place:
        for name in ("metrics.jsonl", "events.jsonl"):
            (run.run_dir / name).unlink(missing_ok=True)
    write_json_atomic(run.run_dir / "config.json", resolved_config("ppo", run.settings, run.knobs))
    if run.resume is not None:
        metrics_path = run.run_dir / "metrics.jsonl"
        kept = metrics_rows_before(metrics_path, int(run.resume["learner"]["round"]))
        metrics_path.write_text("".join(line + "\n" for line in kept))
        keep_events_of_checkpoint(run.run_dir / "events.jsonl", run.resume.get("events_bytes"))


def keep_events_of_checkpoint(path: Path, size: int | None) -> None:
    """Cut `events.jsonl` back to what it held when the checkpoint was saved: the episodes of a
    round that a kill interrupted are run again, and written again. (The rounds' episode numbers
    cannot say which lines to keep: a run extended with `--episodes` reuses the warm start's.) A
    checkpoint from before Esper recorded the size keeps the file whole."""
    if size is not None and path.exists() and path.stat().st_size > size:
        os.truncate(path, size)


def record_round(
    run: PPORun,
    envs: MorphogeneticEnvs,
    learner: Learner,
    row: dict[str, float],
    hub: TelemetryHub,
    force_save: bool = False,
) -> None:
    """Send the round's metrics to telemetry (`metrics.jsonl`, TensorBoard) and, every
    `--save-every` rounds, after the last and when stopping (`force_save`), save a checkpoint
    once the row is written.
    Building the checkpoint is a collective, so every rank calls this."""
    final = learner.episodes_done >= run.config.episodes
    save = learner.round % run.settings["save_every"] == 0 or final or force_save
    settings = {k: v for k, v in run.settings.items() if k in SETTINGS}
    payload = (
        checkpoint_payload(
            learner,
            settings,
            run.config.to_json(),
            jsonable(run.knobs),
            envs.spaces.signature(),
            envs.trained_rng_seeds,
            run.run_dir,
            run.ctx,
        )
        if save
        else None
    )
    if not run.ctx.is_main:
        return
    hub.emit(Event(ROUND_METRICS, learner.episodes_done, learner.round, row))
    hub.flush()
    if payload is not None:
        events = run.run_dir / "events.jsonl"
        payload["events_bytes"] = events.stat().st_size if events.exists() else 0  # what a resume keeps
        payload["clonings"] = run.clonings
        save_checkpoint(checkpoint_path(run.run_dir, learner.round), payload)
    if final:
        save_grown_networks(run.run_dir / "grown", envs, learner.round)


def save_grown_networks(folder: Path, envs: MorphogeneticEnvs, round_index: int) -> None:
    """The networks this rank's envs grew in the round (`round-NNNN-env-MM.pt`, for
    `esper.load_grown`), with what each episode measured beside them."""
    for i, env in enumerate(envs.envs):
        signals = envs.signals[i]
        record = {
            "round": round_index,
            "env": i,
            "final_test_accuracy": envs.last_test_accuracy[i],
            "final_val_accuracy": signals.val_accuracy,
            "host_params": signals.host_params,
            "seed_params": signals.seed_params,
        }
        write_torch_atomic(folder / f"round-{round_index:04d}-env-{i:02d}.pt", env.grown_network(record))


def start_line(run: PPORun, envs: MorphogeneticEnvs, learner: Learner, remaining: int) -> str:
    ranks = f" per rank x {run.ctx.world_size} ranks" if run.ctx.enabled else ""
    resumed = f", resumed from {run.resume_path} (round {learner.round})" if run.resume_path else ""
    if run.init_policy is not None:
        resumed += f", starting from policy {run.settings['init_policy']}"
    return (
        f"esper ppo: task {run.task.name}, {remaining} episode(s) to go of {run.config.episodes}, "
        f"{run.config.n_envs} envs{ranks} x {run.env.max_epochs} epochs, "
        f"slots {' '.join(run.env.enabled_slots)}, reward {run.config.reward.mode}, "
        f"obs_dim {envs.spaces.layout.obs_dim}, heads {list(envs.spaces.actions.head_sizes)}, "
        f"envs {envs_per_device(envs.all_envs)}, policy on {run.policy_device}, run dir {run.run_dir}{resumed}"
    )


def round_line(run: PPORun, learner: Learner, row: dict[str, float]) -> str:
    return (
        f"round {learner.round}: episodes {learner.episodes_done}/{run.config.episodes}  "
        f"return {row['charts/episodic_return']:+.3f}  test_acc {row['charts/final_test_accuracy']:.2f}%  "
        f"val_acc {row['charts/final_val_accuracy']:.2f}%  "
        f"explained_var {row['losses/explained_variance']:+.3f}  "
        f"entropy {row['losses/entropy']:.3f}  SPS {row['charts/SPS']:.2f}"
    )


def run_summary(
    run: PPORun, envs: MorphogeneticEnvs, learner: Learner, last_row: dict[str, float], seconds: float
) -> dict[str, Any]:
    return {
        "task": run.task.name,
        "controller": "ppo",
        "obs_dim": envs.spaces.layout.obs_dim,
        "action_heads": envs.spaces.signature()["action_heads"],
        "observation_layout": list(envs.spaces.layout.feature_names()),
        "splits": run.data.split_sizes(),
        "final_test_accuracy": last_row["charts/final_test_accuracy"],
        "final_val_accuracy": last_row["charts/final_val_accuracy"],
        "rounds": learner.round,
        "episodes": learner.episodes_done,
        "global_step": learner.global_step,
        "final_round": last_row,
        "checkpoint": str(checkpoint_path(run.run_dir, learner.round)),
        "seconds": seconds,
        "settings": run.settings,
        "resolved": {
            "max_epochs": run.env.max_epochs,
            "slots": list(run.env.enabled_slots),
            "blueprints": list(run.blueprints),
            "max_germinations": run.env.max_germinations,
            "devices": [str(d) for d in run.devices],
            "policy_device": str(run.policy_device),
        },
        "trainer": run.config.to_json(),
        "knobs": jsonable(run.knobs),
        "clonings": run.clonings,
        **torch_build(),
    }


def distributed_context(args: argparse.Namespace) -> DistContext:
    """Join the process group when started by `torchrun`. The backend follows `--device`
    (NCCL for CUDA, gloo otherwise); a malformed device is left for `resolve_ppo` to report."""
    try:
        device = torch.device(args.device or DEFAULTS["device"])
    except (RuntimeError, ValueError):
        device = torch.device("cpu")
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return init_distributed(device)


__all__ = ["DEFAULTS", "distributed_context", "resolve_ppo", "run_ppo"]
