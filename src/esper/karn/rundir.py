"""Reading a run directory back: what `esper report` and `esper watch` show.

A run directory is read from its files of record alone (`events.jsonl`, `metrics.jsonl`,
`config.json`, `summary.json`), so a run can be read while it is still being written, or from
another machine's shared disk: a last line still being written is skipped, not an error.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN_COMMANDS = ("heuristic", "grow", "ppo", "eval")
"""The commands that write run directories."""


def recorded_command(config: Any) -> str | None:
    """The command a run's `config.json` says wrote it (records written before it held one: the
    command its command line ran); None when it says nothing."""
    if not isinstance(config, dict):
        return None
    if config.get("command") in RUN_COMMANDS:
        return str(config["command"])
    line = config.get("command_line")
    return next((str(word) for word in line if word in RUN_COMMANDS), None) if isinstance(line, list) else None


class RunDirError(ValueError):
    """A path that is not a readable Esper run directory (the message names it and says why)."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line; a run still writing may leave its last line half-written."""
    if not path.exists():
        return []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise RunDirError(f"{str(path)!r} is not UTF-8 text (byte {exc.start}): not a file Esper wrote") from None
    rows = []
    for number, line in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) - 1:
                break  # being written right now
            raise RunDirError(f"{str(path)!r} line {number + 1} is not JSON") from None
        if not isinstance(row, dict):
            raise RunDirError(f"{str(path)!r} line {number + 1} is not a JSON object: not a file Esper wrote")
        rows.append(row)
    return rows


@dataclass
class EpisodeTrace:
    """One episode as its events tell it."""

    episode: int
    epochs: list[int] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    slots: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    """Per slot, its state at each epoch (stage, alpha, blueprint, contribution)."""
    decisions: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    """Stage changes, each with its `epoch`."""
    rollbacks: list[dict[str, Any]] = field(default_factory=list)
    host_params_by_epoch: list[int | None] = field(default_factory=list)
    seed_params_by_epoch: list[int | None] = field(default_factory=list)
    final_test_accuracy: float | None = None
    final_val_accuracy: float | None = None
    seed_params: int | None = None
    host_params: int | None = None
    train_gflops: float | None = None
    last_seen: int = 0
    """Position in `events.jsonl` of its latest event (episodes that run together interleave)."""

    @property
    def finished(self) -> bool:
        return self.final_test_accuracy is not None


@dataclass
class RunView:
    path: Path
    config: dict[str, Any]
    summary: dict[str, Any] | None
    """None while the run is still going (it is written at the end)."""
    episodes: dict[int, EpisodeTrace]
    rows: list[dict[str, Any]]
    """PPO rounds (`metrics.jsonl`), empty for other runs."""

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def command(self) -> str:
        """The command that wrote the run, as its config records it."""
        return recorded_command(self.config) or ("ppo" if self.rows else "run")

    @property
    def controller(self) -> str:
        """The controller of a `heuristic` or `grow` run (`static`, `heuristic`, ...), else ''."""
        if self.command == "heuristic":
            return "heuristic"
        settings = self.config.get("settings", {})
        return str(settings.get("controller") or "") if isinstance(settings, dict) else ""

    @property
    def grows(self) -> bool:
        """False for a run that cannot grow: the `static` controller, or no germination allowed."""
        settings = self.config.get("settings", {})
        no_germination = isinstance(settings, dict) and settings.get("max_germinations") == 0
        return self.controller != "static" and not no_germination

    @property
    def seed(self) -> int | None:
        settings = self.config.get("settings", {})
        value = settings.get("seed") if isinstance(settings, dict) else None
        return value if isinstance(value, int) else None

    @property
    def task(self) -> str:
        settings = self.config.get("settings", {})
        return str(settings.get("task", "?")) if isinstance(settings, dict) else "?"

    def episode_done(self, episode: EpisodeTrace) -> bool:
        """Finished: its end was recorded, or (PPO, which records no episode end) a round
        counted it among the episodes done."""
        return episode.finished or bool(self.rows and episode.episode < self.rows[-1].get("episodes", 0))

    @property
    def finished_episodes(self) -> list[EpisodeTrace]:
        return [e for _, e in sorted(self.episodes.items()) if e.finished]

    @property
    def last_episode(self) -> EpisodeTrace | None:
        """The episode written to most recently."""
        return max(self.episodes.values(), key=lambda e: e.last_seen) if self.episodes else None

    def latest_episodes(self, n: int) -> list[EpisodeTrace]:
        """The `n` episodes written to most recently, oldest first."""
        return sorted(self.episodes.values(), key=lambda e: e.last_seen)[-n:]


def read_json(path: Path) -> Any:
    """A JSON object file of a run directory (None when absent); a `RunDirError` naming it when
    it is damaged (written atomically, so damage is from outside Esper)."""
    if not path.exists():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(f"{str(path)!r} is damaged ({type(exc).__name__}): not readable as JSON") from None
    if not isinstance(value, dict):
        raise RunDirError(f"{str(path)!r} is damaged: a JSON {type(value).__name__} where an object belongs")
    return value


def add_event(episodes: dict[int, EpisodeTrace], position: int, event: dict[str, Any]) -> None:
    """Add one line of `events.jsonl` to the trace of its episode."""
    trace = episodes.setdefault(event["episode"], EpisodeTrace(event["episode"]))
    trace.last_seen = position
    kind = event["kind"]
    if kind == "epoch":
        trace.epochs.append(event["epoch"])
        trace.train_accuracy.append(event["train_accuracy"])
        trace.val_accuracy.append(event["val_accuracy"])
        trace.decisions.append(event["decision"])
        trace.host_params_by_epoch.append(event.get("host_params"))
        trace.seed_params_by_epoch.append(event.get("seed_params"))
        for slot in event["slots"]:
            trace.slots[slot["slot"]].append({"epoch": event["epoch"], **slot})
    elif kind == "stage_change":
        trace.changes.append({"epoch": event["epoch"], **event})
    elif kind == "governor_rollback":
        trace.rollbacks.append(event)
    elif kind == "episode_end":
        trace.final_test_accuracy = event["final_test_accuracy"]
        trace.final_val_accuracy = event["final_val_accuracy"]
        trace.seed_params = event["seed_params"]
        trace.host_params = event.get("host_params")
        trace.train_gflops = event.get("train_gflops")


def read_run(path: str | Path) -> RunView:
    """The run in `path`, or a `RunDirError` that names it and says what is missing."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{str(path)!r} is not a directory")
    if not any((path / name).exists() for name in ("events.jsonl", "metrics.jsonl", "config.json")):
        raise RunDirError(
            f"{str(path)!r} is not an Esper run directory (no events.jsonl, metrics.jsonl or config.json)"
        )
    config = read_json(path / "config.json") or {}
    summary = read_json(path / "summary.json")
    episodes: dict[int, EpisodeTrace] = {}
    events = path / "events.jsonl"
    for position, event in enumerate(read_jsonl(events)):
        try:
            add_event(episodes, position, event)
        except (KeyError, TypeError, ValueError) as exc:
            raise RunDirError(f"{str(events)!r} line {position + 1} is not an event Esper wrote ({exc!r})") from None
    return RunView(path, config, summary, episodes, read_metrics(path / "metrics.jsonl"))


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The PPO rounds' rows, each checked to be one: numbered by its `round`, numbers throughout."""
    rows = read_jsonl(path)
    for number, row in enumerate(rows):
        numeric = all(isinstance(v, int | float) for v in row.values())
        if not isinstance(row.get("round"), int) or not numeric:
            raise RunDirError(f"{str(path)!r} line {number + 1} is not a round's metrics: not a file Esper wrote")
    return rows
