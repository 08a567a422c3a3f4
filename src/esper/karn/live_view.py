"""`esper watch RUN_DIR`: a live terminal view of a run, drawn from its files alone.

It only reads the run directory (`events.jsonl`, `metrics.jsonl`, `summary.json`), so it can
attach to and detach from a run at any time, on this machine or on a shared disk, and a run
never knows it is watched. Each refresh re-reads the run (`esper.karn.rundir.read_run`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from esper.karn.rundir import EpisodeTrace, RunView, read_run

SPARK = "▁▂▃▄▅▆▇█"
STAGE_STYLE = {
    "TRAINING": "green",
    "BLENDING": "cyan",
    "PROBATIONARY": "yellow",
    "FOSSILIZED": "magenta",
    "CULLED": "red",
}
ROW_METRICS = (
    ("charts/episodic_return", "return", "{:+.3f}"),
    ("charts/final_test_accuracy", "test acc", "{:.2f}%"),
    ("charts/final_val_accuracy", "sel acc", "{:.2f}%"),
    ("losses/explained_variance", "expl var", "{:+.3f}"),
    ("losses/entropy", "entropy", "{:.3f}"),
    ("losses/approx_kl", "approx kl", "{:.4f}"),
    ("diagnostics/keep_cull_auc", "keep/cull auc", "{:.3f}"),
    ("charts/SPS", "SPS", "{:.2f}"),
)
ENVS_SHOWN = 8


def sparkline(values: list[float], width: int = 24) -> str:
    """The last `width` values as block characters, scaled between their min and max."""
    values = values[-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARK[min(int((v - low) / span * (len(SPARK) - 1) + 0.5), len(SPARK) - 1)] for v in values)


def episode_status(run: RunView, episode: EpisodeTrace) -> Text:
    if episode.finished:
        return Text(f"done, test {episode.final_test_accuracy:.2f}%", style="bold")
    if run.episode_done(episode):
        return Text("done", style="bold")
    if any("ended after" in r.get("reason", "") for r in episode.rollbacks):
        return Text("panicked", style="bold red")
    if episode.rollbacks:
        return Text(f"rolled back x{len(episode.rollbacks)}", style="red")
    return Text("running", style="green")


def last_action(episode: EpisodeTrace) -> str:
    if not episode.decisions:
        return ""
    d = episode.decisions[-1]
    return " ".join(str(p) for p in (d["op"].lower(), d["slot"], d["blueprint"]) if p)


def envs_table(run: RunView) -> Table:
    """One row per env: the latest episodes (in a PPO round, each env runs one of them)."""
    table = Table(title="envs (their latest episodes)", box=None, padding=(0, 1))
    slot_names = next((list(e.slots) for e in run.episodes.values() if e.slots), [])
    for column, width in (("episode", 7), ("epoch", 5)):
        table.add_column(column, min_width=width, no_wrap=True, justify="right")
    for name in slot_names:
        table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=18)
    for column, width in (("sel acc", 7), ("trend", 16), ("last action", 11), ("status", 10)):
        table.add_column(column, min_width=width, no_wrap=True, overflow="ellipsis")
    for episode in run.latest_episodes(ENVS_SHOWN):
        cells: list[str | Text] = [str(episode.episode), str(episode.epochs[-1]) if episode.epochs else "0"]
        for name in slot_names:
            state = episode.slots[name][-1] if episode.slots.get(name) else None
            stage = state["stage"] if state else "DORMANT"
            label = stage[:5].lower() + (f" {state['blueprint']}" if state and state["blueprint"] else "")
            cells.append(Text(label, style=STAGE_STYLE.get(stage, "dim")))
        val = episode.val_accuracy
        cells += [
            f"{val[-1]:.1f}" if val else "",
            sparkline(val, 16),
            last_action(episode),
            episode_status(run, episode),
        ]
        table.add_row(*cells)
    return table


def rounds_table(run: RunView) -> Group:
    """The latest round's metrics, four to a line."""
    row = run.rows[-1]
    table = Table.grid(padding=(0, 2))
    shown = [(label, fmt.format(row[key])) for key, label, fmt in ROW_METRICS if key in row]
    for _ in range(4):
        table.add_column(no_wrap=True)
    for start in range(0, len(shown), 4):
        table.add_row(*(Text.assemble((f"{label} ", "dim"), value) for label, value in shown[start : start + 4]))
    ops = sorted(k for k in row if k.startswith("charts/op_"))
    mix = Text.assemble(("op mix ", "dim"), " ".join(f"{k[10:]} {row[k]:.2f}" for k in ops))
    title = Text(f"PPO round {row['round']} ({row.get('episodes', 0):.0f} episodes done)", style="bold")
    return Group(title, table, mix)


def render(run: RunView) -> Group:
    """The whole view of a run as it is now."""
    state = "finished" if run.summary is not None else "running (or stopped)"
    finished = sum(run.episode_done(e) for e in run.episodes.values())
    header = Text(f"{run.name}: {run.command} on {run.task}, {finished} episode(s) done, {state}", style="bold")
    parts: list = [header]
    if run.episodes:
        parts.append(envs_table(run))
    if run.rows:
        parts.append(rounds_table(run))
    if not run.episodes and not run.rows:
        parts.append(Text("no epoch yet: waiting for the run to write its first events"))
    return Group(*parts)


def watch(
    path: Path,
    interval: float,
    once: bool = False,
    console: Console | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Draw the run and redraw it every `interval` seconds until Ctrl-C (or once); exit code 0."""
    console = console or Console()
    if once:
        console.print(render(read_run(path)))
        return 0
    try:
        with Live(render(read_run(path)), console=console, refresh_per_second=4, screen=False) as live:
            while True:
                sleep(interval)
                live.update(render(read_run(path)))
    except KeyboardInterrupt:
        console.print("\ndetached from the run (it goes on)" if not (path / "summary.json").exists() else "\ndetached")
    return 0
