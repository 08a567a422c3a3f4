"""The config tree: every knob a researcher tunes, reachable by a flag and from a file.

A run's *settings* are its shape (task, episodes, envs, devices, seed, ...): the subcommand's own
flags. Its *knobs* come in groups, each a dataclass owned by the package it tunes (PPO, reward,
gates, heuristic, governor, the host's training); jsonargparse generates their flags from the
dataclasses, with types, defaults and the fields' docstrings as help: `--ppo.learning_rate 1e-4`.
A file (`--config run.toml`, or `.yaml`/`.json`) sets both: top-level keys are settings, tables
are knob groups. Precedence: built-in defaults < a resumed checkpoint < the file < flags. An
unknown key, in a file or a flag, is a one-line error naming the valid ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import sys
import tomllib
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from jsonargparse import ArgumentParser, set_parsing_settings

from esper.leyline import GateThresholds
from esper.runs.common import UsageError
from esper.simic.rewards import RewardConfig
from esper.simic.update import PPOConfig
from esper.tamiyo import HeuristicConfig
from esper.tamiyo.heuristic import tuned_heuristic_knobs
from esper.tolaria import GovernorConfig, TaskSpec

set_parsing_settings(docstring_parse_attribute_docstrings=True)


@dataclass(frozen=True)
class HostTraining:
    """The host's training hyperparameters; None keeps the task's own."""

    batch_size: int | None = None
    """Training images (or windows) per optimisation step."""
    host_lr: float | None = None
    """Peak learning rate of the host's AdamW (the episode's cosine schedule scales it)."""
    seed_lr: float | None = None
    """Peak learning rate of each seed's AdamW."""
    weight_decay: float | None = None
    """AdamW weight decay, for host and seeds."""
    width: int | None = None
    """The host's width (CNN channels of the first block, transformer d_model)."""
    samples_per_epoch: int | None = None
    """Training images (or text windows) drawn per epoch, in place of the task's count: fewer
    make a cheaper training variant of the task (shapes draws 10,000 of its 50,000 per epoch)."""
    lr_warmup_epochs: int | None = None
    """Epochs of linear learning-rate warm-up before the cosine decay (epoch k of W at k / (W + 1)
    of the peak), and for each seed over its first W epochs from germination. The task's own when
    not given: shapes 3 of its 40 epochs (since 2026-11-28), the same share of a shorter episode
    rounded down; the other embedded tasks none."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "width", "samples_per_epoch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"host.{name} must be >= 1, got {value}")
        if self.lr_warmup_epochs is not None and self.lr_warmup_epochs < 0:
            raise ValueError(f"host.lr_warmup_epochs must be >= 0, got {self.lr_warmup_epochs}")

    def with_episode_warmup(self, task: TaskSpec, max_epochs: int) -> HostTraining:
        """These knobs with the warm-up the episode runs written in: the task's own, fitted to
        `max_epochs`, when none was given. A run directory records it, so a run resumed after a
        task's default warm-up changed is refused, not continued on another recipe."""
        if self.lr_warmup_epochs is not None:
            return self
        return dataclasses.replace(self, lr_warmup_epochs=task.warmup_for(max_epochs))

    def apply(self, task: TaskSpec) -> TaskSpec:
        """`task` with these hyperparameters in place of its own (the width and the warm-up go to
        the env, which fits the task's own warm-up to its episode)."""
        env_knobs = ("width", "lr_warmup_epochs")
        given = {k: v for k, v in dataclasses.asdict(self).items() if v is not None and k not in env_knobs}
        return dataclasses.replace(task, **given)


Group = Callable[[], Any]
"""A knob group's default instance."""

PPO_GROUPS: dict[str, Group] = {
    "ppo": lambda: PPOConfig(gamma=1.0),
    "reward": RewardConfig,
    "gates": GateThresholds,
    "governor": GovernorConfig,
    "host": HostTraining,
    "heuristic": HeuristicConfig,
}
"""The knobs of `esper ppo` (the trainer's gamma is 1: see `esper.simic.rewards`). `heuristic` is
the teacher of the warm start (`--clone-episodes`): the task's tuned heuristic unless changed."""

HEURISTIC_GROUPS: dict[str, Group] = {
    "heuristic": HeuristicConfig,
    "gates": GateThresholds,
    "governor": GovernorConfig,
    "host": HostTraining,
}
"""The knobs of `esper heuristic`."""


# --------------------------------------------------------------------------- files
def read_config_file(path: str, source: str | None = None) -> dict[str, Any]:
    """A TOML, YAML or JSON file as a dict; a one-line `UsageError` for anything else, naming
    the file as the user gave it (`source`: `--config PATH` unless told otherwise)."""
    file = Path(path)
    named = source or f"--config {path!r}"
    readers: dict[str, Callable[[str], Any]] = {".toml": tomllib.loads, ".json": json.loads}
    try:
        import yaml

        readers.update({".yaml": yaml.safe_load, ".yml": yaml.safe_load})
    except ImportError:  # pragma: no cover - PyYAML comes with jsonargparse
        pass
    if file.suffix not in readers:
        raise UsageError(f"{named}: unknown file type {file.suffix!r}; choose from: {' '.join(readers)}")
    try:
        data = readers[file.suffix](file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{named} cannot be read: {exc.strerror or exc}") from None
    except Exception as exc:  # each format's own parse error
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{named} is not valid {file.suffix[1:].upper()}: {first}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{named} must hold a table of settings, got {type(data).__name__}")
    return data


def split_config(
    data: dict[str, Any], settings: Iterable[str], groups: dict[str, Group], source: str
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(settings, knobs by group) of a file's table; an unknown key names the valid ones."""
    settings = tuple(settings)
    flat: dict[str, Any] = {}
    knobs: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        if key in groups:
            if not isinstance(value, dict):
                raise UsageError(f"{source}: {key!r} is a group of knobs and needs a table, got {value!r}")
            valid = group_fields(groups[key])
            unknown = sorted(set(value) - set(valid))
            if unknown:
                raise UsageError(
                    f"{source}: unknown key '{key}.{unknown[0]}'; valid keys of [{key}]: {' '.join(valid)}"
                )
            knobs[key] = dict(value)
        elif key in settings:
            flat[key] = value
        else:
            valid = " ".join([*settings, *(f"[{g}]" for g in groups)])
            raise UsageError(f"{source}: unknown key {key!r}; valid keys: {valid}")
    return flat, knobs


def config_file(
    args: argparse.Namespace, settings: Iterable[str], groups: dict[str, Group]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The settings and knobs of `--config`, if given (both empty otherwise), with the knobs of a
    Python call (`python_request`) over the file's."""
    called = getattr(args, "knobs", None) or {}
    if args.config is None:
        return {}, called
    source = f"--config {args.config!r}"
    flat, knobs = split_config(read_config_file(args.config), settings, groups, source)
    knobs = {g: {**knobs.get(g, {}), **called.get(g, {})} for g in groups if g in knobs or g in called}
    return typed_settings(flat, args.settings_parser, source), knobs


def python_request(
    command: str,
    defaults: dict[str, Any],
    groups: dict[str, Group],
    settings: dict[str, Any],
    knobs: dict[str, dict[str, Any]] | None,
    **run: Any,
) -> argparse.Namespace:
    """What the command line would have parsed, from a call of `esper.runs`: the settings by
    their names (`max_epochs=4`), the knobs as one table per group (`{"ppo": {"lr": 1e-4}}`).
    An unknown name is a `UsageError` naming the valid ones, as in a config file."""
    source = f"esper.runs.{'evaluate' if command == 'eval' else command}()"
    flat, _ = split_config(dict(settings), defaults, {}, source)
    _, tables = split_config(dict(knobs or {}), (), groups, f"{source} knobs")
    return argparse.Namespace(command=command, config=None, knobs=tables, track=None, wandb_project=None, **run, **flat)


def typed_settings(flat: dict[str, Any], parser: argparse.ArgumentParser, source: str) -> dict[str, Any]:
    """A file's settings read by the command's own flag parser, as if given as flags: so a file
    is held to the flags' types (`max_epochs = 2.5` is refused as `--max-epochs` refuses 2.5,
    `slots = "early"` is one slot) and its errors name the key."""
    actions = {a.dest: a for a in parser._actions}  # argparse keeps its actions in this list
    typed: dict[str, Any] = {}
    for key, value in flat.items():
        action = actions.get(key)
        if value is None or action is None:
            typed[key] = value
            continue
        if isinstance(value, dict) or (isinstance(value, list) and action.nargs not in ("+", "*")):
            raise UsageError(f"{source}: {key} takes one value, got {value!r}")
        flag = action.option_strings[-1]
        if action.nargs == 0:  # a switch
            if not isinstance(value, bool):
                raise UsageError(f"{source}: {key} takes true or false, got {value!r}")
            typed[key] = value
            continue
        if isinstance(value, bool):
            raise UsageError(f"{source}: {key} takes what {flag} takes, not {value!r}")
        values = value if isinstance(value, list) else [value]
        try:
            parsed, _ = parser.parse_known_args([flag, *(str(v) for v in values)])
        except UsageError as exc:
            raise UsageError(f"{source}: {key}: {exc}") from None
        typed[key] = getattr(parsed, key)
    return typed


def over_tuned_heuristic(task_name: str, file_knobs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A file's knobs over the task's tuned heuristic (`esper.tamiyo.tuned_heuristic_knobs`), so
    the heuristic every command runs is the tuned one unless a file or a flag says otherwise."""
    return {**file_knobs, "heuristic": {**tuned_heuristic_knobs(task_name), **file_knobs.get("heuristic", {})}}


def merge_settings(defaults: dict[str, Any], *layers: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """`defaults`, then each layer (a checkpoint's, a file's), then the flags given."""
    given = {k: getattr(args, k) for k in defaults if getattr(args, k, None) is not None}
    merged = dict(defaults)
    for layer in (*layers, given):
        merged.update(layer)
    return merged


def group_fields(group: Group) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(group()))


# --------------------------------------------------------------------------- flags
def knobs_parser(groups: dict[str, Group], defaults: dict[str, dict[str, Any]] | None = None) -> ArgumentParser:
    """A parser of the knob flags, generated from the groups' dataclasses, with `defaults`
    (a checkpoint's or a file's values) in place of the built-in ones."""
    parser = ArgumentParser(exit_on_error=False, prog="esper", add_help=False)
    for name, group in groups.items():
        parser.add_class_arguments(type(group()), name, fail_untyped=False)
        base = dataclasses.asdict(group())
        base.update((defaults or {}).get(name, {}))
        parser.set_defaults({f"{name}.{k}": v for k, v in base.items()})
    return parser


def parse_knobs(
    groups: dict[str, Group], rest: Sequence[str], defaults: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The knob groups as dataclasses, from the flags left over by the settings' parser; a bad
    flag or value is a one-line `UsageError`."""
    parser = knobs_parser(groups, defaults)
    try:
        parsed = parser.parse_args(list(rest))
        for name, group in groups.items():
            if isinstance(group, type) and dataclasses.is_dataclass(group):
                check_knob_types(name, group, {f.name: parsed[f"{name}.{f.name}"] for f in dataclasses.fields(group)})
        namespace = parser.instantiate(parsed)
    except (argparse.ArgumentError, ValueError, TypeError) as exc:  # jsonargparse's, and the dataclasses' checks
        message = " ".join(str(exc).split()).replace("<class '", "").replace("'>", "")
        if message.startswith("unrecognized arguments"):
            message += f" (knob flags are --GROUP.KNOB, groups: {' '.join(groups)}; see --help)"
        raise UsageError(message) from None
    return {name: namespace[name] for name in groups}


SCALARS = (bool, int, float, str)


def check_knob_types(name: str, group: Group, values: dict[str, Any]) -> None:
    """A knob of a plain type (bool, int, float, str, or one of them or None) holds a value of
    that type. Flags are parsed to their types, but a file's values and a checkpoint's reach the
    dataclass as they were written (`[heuristic] warmup_epochs = "x"` was a traceback mid-run)."""
    hints = typing.get_type_hints(group)
    for field in dataclasses.fields(group):
        hint, value = hints[field.name], values[field.name]
        allowed = tuple(t for t in typing.get_args(hint) or (hint,) if t in (*SCALARS, type(None)))
        if not allowed or len(allowed) < len(typing.get_args(hint) or (hint,)):
            continue  # a structured type (a tuple, an enum): its own parsing checks it
        ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
        if float in allowed and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            kinds = " or ".join("none" if t is type(None) else t.__name__ for t in allowed)
            raise UsageError(f"[{name}] {field.name} takes {kinds}, got {value!r}")


# --------------------------------------------------------------------------- the resolved tree
def jsonable(value: Any) -> Any:
    """Dataclasses, enums, tuples and paths as plain JSON values (enums by name)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def resolved_config(command: str, settings: dict[str, Any], knobs: dict[str, Any]) -> dict[str, Any]:
    """What a run directory records: the command that owns it, the resolved settings and knobs,
    the Esper version and the command line that produced them."""
    return {
        "command": command,
        "esper": version("esper"),
        "command_line": list(sys.argv),
        "settings": jsonable(settings),
        "knobs": jsonable(knobs),
    }
