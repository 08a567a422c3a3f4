"""The report's figures, drawn with matplotlib from run views (`esper.karn.rundir`).

Each function draws one figure for one or several runs (overlaid, one colour per run) and
returns it; `esper.karn.html` saves them as PNG and puts them on the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or used
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from esper.karn.rundir import EpisodeTrace, RunView

STAGE_COLOURS = {
    "DORMANT": "#ffffff",
    "GERMINATED": "#c7e9c0",
    "TRAINING": "#74c476",
    "BLENDING": "#6baed6",
    "PROBATIONARY": "#fdae6b",
    "FOSSILIZED": "#756bb1",
    "CULLED": "#de2d26",
}
PPO_PANELS = (
    ("charts/episodic_return", "episodic return"),
    ("losses/explained_variance", "value explained variance"),
    ("losses/approx_kl", "approx KL"),
    ("charts/final_test_accuracy", "test accuracy at episode end (%)"),
)


def colours(n: int) -> list[str]:
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(n)]


def mean_by_epoch(
    episodes: Sequence[EpisodeTrace], field: str
) -> tuple[list[int], list[float], list[float], list[float]]:
    """Per epoch: the mean over episodes of `field`, with its minimum and maximum."""
    by_epoch: dict[int, list[float]] = {}
    for episode in episodes:
        for epoch, value in zip(episode.epochs, getattr(episode, field), strict=True):
            by_epoch.setdefault(epoch, []).append(value)
    epochs = sorted(by_epoch)
    return (
        epochs,
        [fmean(by_epoch[e]) for e in epochs],
        [min(by_epoch[e]) for e in epochs],
        [max(by_epoch[e]) for e in epochs],
    )


def host_accuracy(runs: Sequence[RunView]) -> Figure:
    """Train (dashed) and selection (solid) accuracy per epoch, mean over the finished episodes
    with the min-max band, and each episode's test accuracy at its end (dots)."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for run, colour in zip(runs, colours(len(runs)), strict=True):
        episodes = run.finished_episodes or list(run.episodes.values())
        n = len(episodes)
        epochs, val, low, high = mean_by_epoch(episodes, "val_accuracy")
        ax.plot(epochs, val, color=colour, label=f"{run.name}: selection (mean of {n})")
        ax.fill_between(epochs, low, high, color=colour, alpha=0.15, linewidth=0)
        epochs, train, _, _ = mean_by_epoch(episodes, "train_accuracy")
        ax.plot(epochs, train, color=colour, linestyle="--", label=f"{run.name}: train")
        ends = [(e.epochs[-1], e.final_test_accuracy) for e in episodes if e.finished and e.epochs]
        if ends:
            ax.scatter(*zip(*ends, strict=True), color=colour, marker="o", s=18, zorder=3, label=f"{run.name}: test")
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Host accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def swimlanes(runs: Sequence[RunView]) -> Figure:
    """For each run's last episode, one lane per slot: its stage over epochs (colour), the
    blueprint where a seed was germinated, a star where it fossilized and a cross where it was culled."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.2 + 1.1 * len(runs) * 2), squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        episode = run.last_episode
        if episode is None:
            ax.set_axis_off()
            continue
        names = list(episode.slots)
        for row, name in enumerate(names):
            for state in episode.slots[name]:
                ax.barh(row, 1, left=state["epoch"] - 1, color=STAGE_COLOURS.get(state["stage"], "#cccccc"), height=0.6)
        for change in episode.changes:
            row = names.index(change["slot"]) if change["slot"] in names else None
            if row is None:
                continue
            if change["target"] == "GERMINATED":
                ax.text(change["epoch"] - 1, row + 0.38, change["blueprint"] or "", fontsize=6)
            elif change["target"] == "FOSSILIZED":
                ax.scatter(change["epoch"] - 0.5, row, marker="*", color="black", s=40, zorder=3)
            elif change["target"] == "CULLED":
                ax.scatter(change["epoch"] - 0.5, row, marker="x", color="black", s=30, zorder=3)
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(-0.6, len(names) - 0.2)
        ax.invert_yaxis()
        ax.set_xlabel("epoch")
        ax.set_title(f"{run.name}: slots in episode {episode.episode}", fontsize=9)
    handles = [Patch(color=c, label=s.lower()) for s, c in STAGE_COLOURS.items() if s != "DORMANT"]
    fig.legend(handles=handles, loc="lower center", ncol=6, fontsize=7)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def contributions(runs: Sequence[RunView]) -> Figure:
    """Each slot's measured contribution (selection accuracy with the seed minus without it),
    per epoch of each run's last episode."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for run, colour in zip(runs, colours(len(runs)), strict=True):
        episode = run.last_episode
        if episode is None:
            continue
        for style, (name, states) in zip(("-", "--", ":", "-."), episode.slots.items(), strict=False):
            points = [(s["epoch"], s["contribution"]) for s in states if s["contribution"] is not None]
            if points:
                ax.plot(
                    *zip(*points, strict=True), color=colour, linestyle=style, marker=".", label=f"{run.name}: {name}"
                )
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("epoch")
    ax.set_ylabel("contribution (points)")
    ax.set_title("Seed contributions (last episode)")
    ax.grid(alpha=0.3)
    if ax.lines[1:]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def ppo_rounds(runs: Sequence[RunView]) -> Figure:
    """Per round: return, explained variance, KL, test accuracy, entropy per head, op mix and
    reward parts (the op mix and reward parts of the first run, when several are overlaid)."""
    fig, axes = plt.subplots(3, 3, figsize=(12, 9))
    flat = axes.ravel()
    palette = colours(len(runs))
    for ax, (key, title) in zip(flat[:4], PPO_PANELS, strict=True):
        for run, colour in zip(runs, palette, strict=True):
            points = [(r["round"], r[key]) for r in run.rows if key in r]
            if points:
                ax.plot(*zip(*points, strict=True), color=colour, marker=".", label=run.name)
        ax.set_title(title, fontsize=9)
    entropy_ax = flat[4]
    for run, colour in zip(runs, palette, strict=True):
        heads = sorted({k for r in run.rows for k in r if k.startswith("losses/entropy_")})
        for style, key in zip(("-", "--", ":", "-."), heads, strict=False):
            points = [(r["round"], r[key]) for r in run.rows if key in r]
            entropy_ax.plot(*zip(*points, strict=True), color=colour, linestyle=style, label=f"{key[15:]}")
    entropy_ax.set_title("entropy per head", fontsize=9)
    entropy_ax.legend(fontsize=6)
    first = runs[0].rows
    rounds = [r["round"] for r in first]
    ops = sorted({k for r in first for k in r if k.startswith("charts/op_")})
    if ops:
        flat[5].stackplot(rounds, *[[r.get(k, 0.0) for r in first] for k in ops], labels=[k[10:] for k in ops])
        flat[5].legend(fontsize=6, loc="upper right")
    flat[5].set_title(f"op mix ({runs[0].name})", fontsize=9)
    parts = sorted({k for r in first for k in r if k.startswith("rewards/")})
    for key in parts:
        flat[6].plot(rounds, [r.get(key, 0.0) for r in first], marker=".", label=key[8:])
    flat[6].set_title(f"reward parts per episode ({runs[0].name})", fontsize=9)
    if parts:
        flat[6].legend(fontsize=6)
    auc = [(r["round"], r["diagnostics/keep_cull_auc"]) for r in first if "diagnostics/keep_cull_auc" in r]
    if auc:
        flat[7].plot(*zip(*auc, strict=True), marker=".")
    flat[7].set_title("keep/cull AUC", fontsize=9)
    flat[8].set_axis_off()
    for ax in flat[:8]:
        ax.set_xlabel("round", fontsize=8)
        ax.grid(alpha=0.3)
    if len(runs) > 1:
        flat[0].legend(fontsize=7)
    fig.tight_layout()
    return fig
