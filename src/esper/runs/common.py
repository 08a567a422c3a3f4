"""What every run shares: one-line usage errors, setting checks, run directories and their
telemetry."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm import tqdm

from esper.karn.rundir import read_jsonl, recorded_command
from esper.kasmina import MorphogeneticModel
from esper.kasmina.blueprints import get_blueprint
from esper.leyline import parse_slots
from esper.nissa import ConsoleBackend, JsonlBackend, TelemetryHub
from esper.nissa.telemetry import ROUND_METRICS, Backend, Event
from esper.nissa.tensorboard import TensorBoardBackend
from esper.nissa.wandb import INSTALL_HINT, WandbBackend, wandb_available
from esper.tolaria import (
    DatasetError,
    DeviceError,
    EnvConfig,
    TaskSpec,
    get_task,
    resolve_device,
    use_deterministic_kernels,
)
from esper.tolaria.datasets import TaskData

if TYPE_CHECKING:
    from esper.tamiyo import HeuristicConfig


class UsageError(Exception):
    """Bad input: reported as one line, exit code 2."""


class RunFailure(RuntimeError):
    """A run cannot go on for a reason found while it ran, not in its input: one line, exit code 1."""


class AlreadyFinished(Exception):
    """`--resume last` on a run that has already done all it was asked: one line, exit code 0,
    so a command line repeated after a crash (or by a scheduler) is safe when there was none."""

    def __init__(self, run_dir: Path, done: int, episodes: int) -> None:
        super().__init__(f"{run_dir} has finished: {done} of {episodes} episodes; nothing to do")


def torch_build() -> dict[str, str]:
    """The torch version and the CPU kernels it dispatched to, for a run's record. Results are
    bitwise repeatable only where both match: the CPU capability (AVX2, AVX-512, ...) changes the
    rounding of vectorised kernels, `torch.randn` among them (its AVX2 and plain kernels give
    values that differ in their last bits), so even the embedded `shapes` images can differ in
    their last bits between machines."""
    capability = torch.backends.cpu.get_cpu_capability()
    return {"torch": torch.__version__, "cpu_capability": capability, "cpu": cpu_identity()}


KERNEL_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
"""CPU extensions that change which kernels oneDNN and torch pick, and so their rounding."""


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name and its kernel-relevant extensions (`KERNEL_FLAGS`). Two machines of
    one `cpu_capability` can still round apart: a held width-10 `shapes` episode recorded on an
    "AVX512" machine (test 73.78%) ran again on another "AVX512" machine, with AMX, at the same
    commit gave 74.27%. Where /proc/cpuinfo is missing, the platform's processor string."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set(fields.get("flags", "").split())
    present = " ".join(flag for flag in KERNEL_FLAGS if flag in flags)
    return f"{fields.get('model name', platform.machine())} [{present}]"


MAX_RNG_SEED = 2**63 - 1
"""Seeds are torch generator seeds: below 2**63."""


def check_heuristic_slots(knobs: HeuristicConfig, slots: Sequence[str], where: str = "--heuristic.slots") -> None:
    """The heuristic's `slots` knob names slots the run enables."""
    for name in knobs.slots:
        if name not in slots:
            raise UsageError(f"{where}: {name!r} is not a slot this run enables; enabled: {' '.join(slots)}")


def check_heuristic_pins(
    task: TaskSpec,
    knobs: HeuristicConfig,
    slots: Sequence[str],
    blueprints: Sequence[str] | None,
    host_width: int | None,
    prefix: str = "--heuristic.",
) -> dict[str, str]:
    """The heuristic's `slots` knob names slots the run enables, and its `slot_blueprints`, once
    each pair is well formed, a slot the run enables and a blueprint among `blueprints` (when
    given) that fits its slot; `prefix` names where the knobs came from in the error."""
    check_heuristic_slots(knobs, slots, f"{prefix}slots")
    try:
        pinned = knobs.pinned_blueprints(blueprints)
    except ValueError as exc:
        raise UsageError(f"{prefix}{exc}") from None
    check_heuristic_slots(dataclasses.replace(knobs, slots=tuple(pinned)), slots, f"{prefix}slot_blueprints")
    for slot, name in pinned.items():
        check_blueprints_fit(task, host_width, [slot], [name], f"{prefix}slot_blueprints {slot}={name}")
    return pinned


def heuristic_knobs_source(config_path: str | None, rest: Sequence[str]) -> str:
    """The prefix an error about the run's heuristic slot pins names: its flags when given, else
    the `--config` file (a user who never typed `--heuristic.` must be sent to the file)."""
    flags = ("--heuristic.slots", "--heuristic.slot_blueprints")
    if config_path is None or any(token.split("=")[0] in flags for token in rest):
        return "--heuristic."
    return f"--config {config_path!r}: heuristic."


def check_minimum(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {value}")


def run_owner(folder: Path) -> str | None:
    """The command whose run `folder` holds, as its `config.json` records it (or `eval` for an
    `eval.json` beside an unreadable one); None when nothing says."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        config = None
    return recorded_command(config) or ("eval" if (folder / "eval.json").is_file() else None)


def a_run_of(folder: Path, unless: str = "") -> str:
    r"""`an \`esper heuristic\` run`, naming the command that owns `folder` (just `a run` when
    nothing says, or when it is `unless`): the words of a refusal."""
    owner = run_owner(folder)
    return f"an `esper {owner}` run" if owner and owner != unless else "a run"


def check_run_dir(run_dir: Path, run_files: Sequence[str]) -> None:
    """The run directory must be creatable and must not already hold a run (nothing is overwritten)."""
    try:
        existing = [name for name in run_files if (run_dir / name).exists()]
        ancestor = run_dir
        while not ancestor.exists():
            ancestor = ancestor.parent
    except OSError as exc:
        raise UsageError(f"--run-dir {str(run_dir)!r} cannot be checked: {exc.strerror or exc}") from None
    if existing:
        raise UsageError(
            f"run directory {str(run_dir)!r} already holds {a_run_of(run_dir)} ({', '.join(existing)}); "
            "choose a new --run-dir"
        )
    if not ancestor.is_dir():
        raise UsageError(f"--run-dir {str(run_dir)!r} cannot be created: {str(ancestor)!r} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"--run-dir {str(run_dir)!r} cannot be created: {str(ancestor)!r} is not writable")


def refuse_eval_run(path: str | Path, command: str) -> None:
    """`report` and `watch` draw training runs; an `eval` run's record is its `eval.json` (and
    the table `eval` printed), which they used to misread as a run with no epoch yet."""
    if (Path(path) / "eval.json").is_file():
        raise UsageError(
            f"{str(path)!r} is an eval run: its comparison is in eval.json; "
            f"{command} reads training runs (heuristic, grow, ppo)"
        )


def resolve_task(name: str) -> TaskSpec:
    try:
        return get_task(name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def env_config(**fields: Any) -> EnvConfig:
    """The env's settings; a combination they refuse (a warm-up as long as the episode) is a
    one-line error, not a traceback."""
    try:
        return EnvConfig(**fields)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def resolve_device_arg(spec: str) -> torch.device:
    try:
        return resolve_device(spec)
    except DeviceError as exc:
        raise UsageError(str(exc)) from None


def apply_deterministic(settings: dict[str, Any]) -> None:
    """`--deterministic` (None or False: off): torch's deterministic kernels in this process."""
    if settings.get("deterministic"):
        use_deterministic_kernels()


def progress_bar(total: int, unit: str, quiet: bool) -> tqdm:
    """A live bar on stderr only where a person watches it: redirected to a file, its redraws
    would interleave with the per-epoch and per-round lines that already report progress there."""
    return tqdm(total=total, unit=unit, disable=quiet or not sys.stderr.isatty(), file=sys.stderr, dynamic_ncols=True)


def check_host_builds(task: TaskSpec, width: int | None) -> None:
    """The task's host factory accepts `width` (None: the task's own). An own task whose host
    has one shape, or a width it refuses, raised inside the first episode as a traceback, after
    the run directory was written; its ValueError or TypeError is a one-line error here instead.
    The host is built on the CPU as the env builds it (on the meta device a host that reads a
    tensor's values while it is built would fail here and nowhere else), the global RNG left be."""
    try:
        with torch.random.fork_rng(devices=[]):
            task.build_host(width)
    except (TypeError, ValueError) as exc:
        shown = task.host_width if width is None else width
        raise UsageError(
            f"--task {task.name}: its host factory raised at width {shown}: {type(exc).__name__}: {exc}"
        ) from exc


def resolve_slots(task: TaskSpec, names: Sequence[str] | None) -> tuple[str, ...]:
    """The slots a controller may use, in host order (default: all of the host's)."""
    host_slots = task.slot_ids
    try:
        slots = parse_slots(names, host_slots) if names is not None else host_slots
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return tuple(s.name for s in slots)


def resolve_blueprints(task: TaskSpec, names: Sequence[str] | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if names is None:
        return default
    try:
        return tuple(get_blueprint(task.topology, b).name for b in names)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_blueprints_fit(
    task: TaskSpec,
    host_width: int | None,
    slots: Sequence[str],
    blueprints: Sequence[str] | None,
    flag: str | None = None,
) -> None:
    """Every slot a controller may use takes every blueprint it may choose: a width blueprint
    needs a layer pair in the segment before the slot, of enough hidden units for its size.
    `flag` names the option in the error (default: `--blueprints NAME`)."""
    if not blueprints:
        return
    with torch.device("meta"):  # shapes only: no memory, no draw from the global RNG
        model = MorphogeneticModel(task.build_host(host_width))
    for slot in slots:
        for name in blueprints:
            try:
                model.slot(slot).seed_param_count(name)
            except ValueError as exc:
                raise UsageError(f"{flag or f'--blueprints {name}'}: {exc}") from None


def load_task_data(task: TaskSpec, data_dir: str | None) -> TaskData:
    """The task's data, drawing `task.samples_per_epoch` training samples per epoch when set."""
    n = task.samples_per_epoch
    if n is not None and n < task.batch_size:
        raise UsageError(
            f"host.samples_per_epoch {n} is below the batch size {task.batch_size}: an epoch would train nothing"
        )
    try:
        data = task.load_data(task.resolve_data_dir(data_dir))
    except DatasetError as exc:
        raise UsageError(str(exc)) from None
    if n is None:
        return data
    try:
        return data.with_samples_per_epoch(n)
    except ValueError as exc:
        raise UsageError(f"host.samples_per_epoch: {exc}") from None


def tracking_project(args: argparse.Namespace) -> str | None:
    """The W&B project to log to, or None without `--track` (checked before anything is written)."""
    if not args.track:
        if args.wandb_project is not None:
            raise UsageError("--wandb-project is given without --track")
        return None
    if not wandb_available():
        raise UsageError(f"--track needs the wandb package: {INSTALL_HINT}")
    return args.wandb_project or "esper"


def run_telemetry(
    run_dir: Path,
    config: dict[str, Any],
    console: bool,
    rounds: bool = False,
    wandb_project: str | None = None,
    write_line: Callable[[str], None] | None = None,
) -> TelemetryHub:
    """The hub of a run directory: `events.jsonl`, `metrics.jsonl` for PPO rounds (`rounds`),
    TensorBoard in `tensorboard/`, W&B when a project is given (`--track`), and the console's
    progress lines unless quiet (through `write_line` when a progress bar is drawn).

    `tensorboard/` is derived from the two files of record: it is rebuilt from them here, so a
    resumed run, whose files kept nothing after its checkpoint, shows no point twice."""
    backends: list[Backend] = [JsonlBackend(run_dir / "events.jsonl")]
    if rounds:
        backends.append(JsonlBackend(run_dir / "metrics.jsonl", rows_only=True))
    backends.append(rebuilt_tensorboard(run_dir, config))
    if wandb_project is not None:
        backends.append(WandbBackend(run_dir, config, wandb_project))
    if console:
        backends.append(ConsoleBackend(write_line=write_line))
    return TelemetryHub(backends)


def rebuilt_tensorboard(run_dir: Path, config: dict[str, Any]) -> TensorBoardBackend:
    """A TensorBoard backend on an emptied `run_dir/tensorboard`, that has replayed what
    `events.jsonl` and `metrics.jsonl` hold (nothing, for a new run)."""
    shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
    board = TensorBoardBackend(run_dir / "tensorboard", config)
    last_time: dict[int, float] = {}  # episode -> when its last event happened
    for record in read_jsonl(run_dir / "events.jsonl"):
        event = Event.from_json(record)
        board.write(event)
        last_time[event.episode] = max(event.time, last_time.get(event.episode, event.time))
    for row in read_jsonl(run_dir / "metrics.jsonl"):
        episodes = int(row["episodes"])
        # A row records no time of its own; it was written when its round's episodes had ended.
        ended = [when for episode, when in last_time.items() if episode < episodes]
        when = {"time": max(ended)} if ended else {}
        board.write(Event(ROUND_METRICS, episodes, int(row["round"]), row, **when))
    return board


LEGACY_KNOB_VALUES: dict[tuple[str, str], Any] = {
    ("host", "lr_warmup_epochs"): 0,
    ("heuristic", "slots"): [],
    ("heuristic", "grow_together"): False,
    ("heuristic", "slot_blueprints"): [],
}
"""Knobs a run directory once recorded as None (or not at all) and now records resolved, with
the value such a run had: every embedded task's warm-up was 0 until shapes took 3 on 2026-11-28,
a heuristic grew in every enabled slot before its `slots` knob (empty: every one) came, and
grew each seed as it fitted before `grow_together` came, and rotated in every slot before
`slot_blueprints` came."""


def legacy_knobs(recorded: dict[str, dict]) -> dict[str, dict]:
    """`recorded` (a run directory's or a checkpoint's knobs) with what an older Esper left
    unresolved filled in (`LEGACY_KNOB_VALUES`), so it is compared, or resumed, as it ran."""
    knobs = {group: dict(values) for group, values in recorded.items()}
    for (group, knob), value in LEGACY_KNOB_VALUES.items():
        if group in knobs and knobs[group].get(knob) is None:
            knobs[group][knob] = value
    return knobs


def knobs_that_differ(recorded: dict[str, dict], now: dict[str, dict]) -> list[str]:
    """The knobs, as `group.knob: recorded -> now`, in which a run's recorded knobs are not `now`'s.
    A knob added to Esper after the run was recorded, at a default of None, is the setting the
    run had: a run started before an upgrade can still be resumed after it. A knob recorded
    unresolved is read as it ran (`legacy_knobs`)."""
    recorded = legacy_knobs(recorded)
    differ = []
    for group in sorted(recorded.keys() | now.keys()):
        before, after = recorded.get(group, {}), now.get(group, {})
        for knob in sorted(before.keys() | after.keys()):
            if knob not in before and after[knob] is None:
                continue
            if knob not in before or knob not in after or before[knob] != after[knob]:
                differ.append(f"{group}.{knob}: {before.get(knob)!r} -> {after.get(knob)!r}")
    return differ


def check_same_run(run_dir: Path, config: dict[str, Any], free: frozenset[str]) -> bool:
    """For `--resume last`: whether `run_dir` holds a run to continue (False: start fresh there),
    refusing one recorded with other settings or knobs than `config` (`free` settings may differ)."""
    recorded = run_dir / "config.json"
    if not recorded.exists():
        return False
    before = json.loads(recorded.read_text())
    keys = set(before["settings"]) | set(config["settings"])
    differ = sorted(k for k in keys if k not in free and before["settings"].get(k) != config["settings"].get(k))
    knobs = knobs_that_differ(before["knobs"], json.loads(json.dumps(config["knobs"])))
    if differ or knobs:
        what = ", ".join(differ) if differ else "the knobs " + "; ".join(knobs)
        raise UsageError(f"{str(run_dir)!r} was run with other settings ({what}): resume it with the same ones")
    return True
