"""The report's figures, drawn with matplotlib from run views (`esper.karn.rundir`).

Each function draws one figure for one or several runs (overlaid, one colour per run) and
returns it; `esper.karn.html` saves them as PNG and puts them on the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import Any

import matplotlib
import matplotlib.colors
import matplotlib.ticker

matplotlib.use("Agg")  # files only: no display is needed or used
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

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


CHANGE_MARKERS = {
    "GERMINATED": ("^", "germinated"),
    "FOSSILIZED": ("*", "fossilized"),
    "CULLED": ("X", "culled"),
}
"""How a stage change is marked on a curve: its marker and its word in the legend."""


def slot_colours(names: Sequence[str]) -> dict[str, str]:
    """One colour per slot, the same in every figure (runs are told apart by line style there)."""
    palette = plt.get_cmap("Dark2").colors
    return {name: matplotlib.colors.to_hex(palette[i % len(palette)]) for i, name in enumerate(names)}


def run_label(run: RunView) -> str:
    return run.name if run.grows else f"{run.name} (static)"


def mark_changes(ax: Axes, episode: EpisodeTrace, colour: str) -> None:
    """Each germination, fossilization and cull of `episode`, on its selection curve at its epoch."""
    accuracy = dict(zip(episode.epochs, episode.val_accuracy, strict=True))
    for change in episode.changes:
        if change["target"] in CHANGE_MARKERS and change["epoch"] in accuracy:
            marker, _ = CHANGE_MARKERS[change["target"]]
            ax.scatter(
                change["epoch"], accuracy[change["epoch"]], marker=marker, s=70, zorder=4,
                facecolor=colour, edgecolor="black", linewidth=0.8,
            )  # fmt: skip


def host_accuracy(runs: Sequence[RunView]) -> Figure:
    """Train (dashed) and selection (solid) accuracy per epoch, mean over the finished episodes
    with the min-max band, each episode's test accuracy at its end (dots), and the last episode's
    germinations, fossilizations and culls marked on its selection curve."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for run, colour in zip(runs, colours(len(runs)), strict=True):
        episodes = run.finished_episodes or list(run.episodes.values())
        n, label = len(episodes), run_label(run)
        epochs, val, low, high = mean_by_epoch(episodes, "val_accuracy")
        ax.plot(epochs, val, color=colour, label=f"{label}: selection (mean of {n})")
        ax.fill_between(epochs, low, high, color=colour, alpha=0.15, linewidth=0)
        epochs, train, _, _ = mean_by_epoch(episodes, "train_accuracy")
        ax.plot(epochs, train, color=colour, linestyle="--", label=f"{label}: train")
        ends = [(e.epochs[-1], e.final_test_accuracy) for e in episodes if e.finished and e.epochs]
        if ends:
            ax.scatter(*zip(*ends, strict=True), color=colour, marker="o", s=18, zorder=3, label=f"{label}: test")
        last = run.last_episode
        if last is not None:
            if n > 1:
                ax.plot(last.epochs, last.val_accuracy, color=colour, linewidth=0.7, linestyle=":")
            mark_changes(ax, last, colour)
    for marker, word in CHANGE_MARKERS.values():
        ax.scatter([], [], marker=marker, facecolor="white", edgecolor="black", label=f"seed {word}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Host accuracy")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def parameters(runs: Sequence[RunView]) -> Figure:
    """Per epoch of each run's last episode: the host's parameters (solid) and the host's plus
    the live seeds' (dashed); a width seed merged at fossilization moves from the second to the
    first."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for run, colour in zip(runs, colours(len(runs)), strict=True):
        episode = run.last_episode
        if episode is None:
            continue
        rows = [
            (epoch, host, host + (seeds or 0))
            for epoch, host, seeds in zip(
                episode.epochs, episode.host_params_by_epoch, episode.seed_params_by_epoch, strict=True
            )
            if host is not None
        ]
        if rows:
            epochs, host, total = zip(*rows, strict=True)
            ax.plot(epochs, host, color=colour, label=f"{run_label(run)}: host")
            ax.plot(epochs, total, color=colour, linestyle="--", label=f"{run_label(run)}: host + seeds")
    ax.set_xlabel("epoch")
    ax.set_ylabel("parameters")
    ax.set_title("Parameters (last episode)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def swimlanes(runs: Sequence[RunView]) -> Figure:
    """For each run's last episode, one lane per slot: its stage at each epoch (a bar centred on
    the epoch, as the log reports it), the blueprint where a seed was germinated, a star where it
    fossilized and a cross where it was culled."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.2 + 1.1 * len(runs) * 2), squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        episode = run.last_episode
        if episode is None:
            ax.set_axis_off()
            continue
        draw_lanes(ax, episode)
        ax.set_title(f"{run_label(run)}: slots in episode {episode.episode}", fontsize=9)
    handles = [Patch(color=c, label=s.lower()) for s, c in STAGE_COLOURS.items() if s != "DORMANT"]
    fig.legend(handles=handles, loc="lower center", ncol=6, fontsize=7)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def draw_lanes(ax: Axes, episode: EpisodeTrace) -> None:
    names = list(episode.slots)
    for row, name in enumerate(names):
        for state in episode.slots[name]:
            colour = STAGE_COLOURS.get(state["stage"], "#cccccc")
            ax.barh(row, 1, left=state["epoch"] - 0.5, color=colour, height=0.6, edgecolor="none")
    for change in episode.changes:
        if change["slot"] not in names:
            continue
        row = names.index(change["slot"])
        if change["target"] == "GERMINATED":
            ax.text(change["epoch"] - 0.5, row + 0.42, change["blueprint"] or "", fontsize=6)
        elif change["target"] in ("FOSSILIZED", "CULLED"):
            marker = "*" if change["target"] == "FOSSILIZED" else "x"
            ax.scatter(change["epoch"], row, marker=marker, color="black", s=40, zorder=3)
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.6, len(names) - 0.2)
    ax.invert_yaxis()
    if episode.epochs:
        ax.set_xlim(min(episode.epochs) - 0.5, max(episode.epochs) + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.grid(axis="x", alpha=0.3)


def contributions(runs: Sequence[RunView]) -> Figure:
    """Each slot's measured contribution (selection accuracy with the seed minus without it),
    per epoch of each run's last episode: a colour per slot, a line style per run."""
    fig, ax = plt.subplots(figsize=(8, 4))
    names = list(dict.fromkeys(name for run in runs if run.last_episode for name in run.last_episode.slots))
    by_slot = slot_colours(names)
    for run, style in zip(runs, ("-", "--", ":", "-."), strict=False):
        episode = run.last_episode
        if episode is None:
            continue
        for name, states in episode.slots.items():
            points = [(s["epoch"], s["contribution"]) for s in states if s["contribution"] is not None]
            if points:
                label = f"{run_label(run)}: {name}" if len(runs) > 1 else name
                ax.plot(*zip(*points, strict=True), color=by_slot[name], linestyle=style, marker=".", label=label)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("epoch")
    ax.set_ylabel("contribution (points)")
    ax.set_title("Seed contributions (last episode)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if ax.lines[1:]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no seed reached blending: nothing was measured", transform=ax.transAxes, ha="center")
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
    if entropy_ax.lines:
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
    else:
        flat[7].text(
            0.5, 0.5, "no round had both a helpful and a harmful\nprobationary seed: the AUC is undefined",
            transform=flat[7].transAxes, ha="center", va="center", fontsize=8,
        )  # fmt: skip
    flat[7].set_title("keep/cull AUC", fontsize=9)
    flat[8].set_axis_off()
    for ax in flat[:8]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("round", fontsize=8)
        ax.grid(alpha=0.3)
    if len(runs) > 1:
        flat[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def eval_paired(report: dict[str, Any]) -> Figure:
    """An eval record: each controller's test accuracy per seed (one seed's points joined across
    controllers), and each paired difference with its 95% interval."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1, 1]})
    names = list(report["controllers"])
    columns = [report["controllers"][name]["test_accuracy"] for name in names]
    for seed_values in zip(*columns, strict=True):
        left.plot(range(len(names)), seed_values, color="grey", alpha=0.35, linewidth=0.8)
    for i, (values, colour) in enumerate(zip(columns, colours(len(names)), strict=True)):
        left.scatter([i] * len(values), values, color=colour, s=16, zorder=3)
        left.hlines(fmean(values), i - 0.25, i + 0.25, color="black", linewidth=2, zorder=4)
    left.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    left.set_ylabel("test accuracy (%)")
    left.set_title("per seed (bar: mean)", fontsize=9)
    left.grid(axis="y", alpha=0.3)
    pairs = list(report["paired"].items())
    for row, (_, est) in enumerate(pairs):
        low, high = est["ci95"]
        if low is not None and high is not None:
            right.hlines(row, low, high, color="black", linewidth=1.5)
        right.scatter(est["mean"], row, color="black", zorder=3)
    right.axvline(0.0, color="grey", linewidth=0.8)
    right.set_yticks(range(len(pairs)), [pair for pair, _ in pairs], fontsize=8)
    right.invert_yaxis()
    right.set_xlabel("paired difference in test accuracy (points)")
    right.set_title("paired differences, 95% interval", fontsize=9)
    right.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
