"""`esper report`: one self-contained HTML page (images inlined, no script, no server) and the
PNG figures behind it, for one run directory or several overlaid, or for one eval run."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from esper.karn import figures
from esper.karn.evaluation import added_params
from esper.karn.files import write_atomic
from esper.karn.rundir import EpisodeTrace, RunView
from esper.karn.stats import paired_difference

FIGURES: tuple[tuple[str, str, Callable[[Sequence[RunView]], Figure], str], ...] = (
    (
        "host_accuracy",
        "Host accuracy per epoch",
        figures.host_accuracy,
        "Solid: selection accuracy (the split every decision reads), the mean over the finished episodes "
        "with their range shaded; dashed: train accuracy; dots: each episode's test accuracy at its end. "
        "Triangles, stars and crosses mark the last episode's germinations, fossilizations and culls on "
        "its selection curve. A grown run above its static twin (the same seed, no growth) is growth "
        "that paid.",
    ),
    (
        "parameters",
        "Parameters per epoch",
        figures.parameters,
        "The last episode's parameters: the host's own (solid) and with its live seeds (dashed). The gap "
        "is what the seeds cost; a fossilized width seed is merged into the host and moves into the solid line.",
    ),
    (
        "swimlanes",
        "Slots over the last episode",
        figures.swimlanes,
        "One lane per slot: its stage at each epoch (a bar centred on the epoch, numbered as the log and "
        "events.jsonl number them), the blueprint where a seed was germinated, a star where it was "
        "fossilized and a cross where it was culled.",
    ),
    (
        "contributions",
        "Seed contributions",
        figures.contributions,
        "Each slot's counterfactual contribution, in points of selection accuracy: the network with the "
        "seed minus with its alpha forced to 0, each with its own BatchNorm statistics. Measured from "
        "blending on; one colour per slot. Above zero the seed helps; the gates keep or cull on this reading.",
    ),
)
PPO_FIGURE = (
    "ppo_rounds",
    "PPO, per round",
    figures.ppo_rounds,
    "Per PPO round (one episode per env): the mean episodic return, how much of the return's variance the "
    "value head explains, the approximate KL of the update, the test accuracy at episode end, each action "
    "head's entropy, the mix of operations chosen, the reward's parts, and the keep/cull AUC of the "
    "policy's decisions on probationary seeds (how well its keep score ranks helpful above harmful seeds).",
)
EVAL_CAPTION = (
    "Left: each controller's test accuracy on every seed (grey lines join one seed across controllers). "
    "Right: the paired differences, each point the mean over seeds with its 95% interval; an interval "
    "clear of zero is a difference these seeds resolve."
)
STYLE = """body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}td.num{text-align:right}img{max-width:100%}
p.caption{color:#444;font-size:14px;max-width:900px}"""


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()


def html_table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A table; numbers right-aligned."""
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)

    def cell(value: Any) -> str:
        number = isinstance(value, str) and value.lstrip("+-").replace(",", "").replace(".", "").isdigit()
        return f"<td{' class=num' if number else ''}>{html.escape(str(value))}</td>"

    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{header}</tr>{body}</table>"


def mean_text(values: Sequence[float | int | None], spec: str) -> str:
    present = [v for v in values if v is not None]
    return format(fmean(present), spec) if present else ""


def static_twin(runs: Sequence[RunView]) -> RunView | None:
    """The first run that cannot grow (the `static` controller, or no germination allowed), when
    others are given beside it."""
    return next((run for run in runs if not run.grows), None) if len(runs) > 1 else None


def rng_seeds(run: RunView) -> dict[int, EpisodeTrace]:
    """Finished episodes by the RNG seed they trained with (episode e of seed S: S + e)."""
    base = run.seed or 0
    return {base + e.episode: e for e in run.finished_episodes}


def against_twin(run: RunView, twin: RunView) -> str:
    """Mean test accuracy minus the static twin's, paired by RNG seed, with its 95% interval."""
    mine, theirs = rng_seeds(run), rng_seeds(twin)
    common = sorted(set(mine) & set(theirs))
    if run is twin or run.task != twin.task or not common:
        return ""
    estimate = paired_difference(
        [mine[s].final_test_accuracy for s in common],  # type: ignore[misc]
        [theirs[s].final_test_accuracy for s in common],  # type: ignore[misc]
    )
    low, high = estimate.to_json()["ci95"]  # None where one seed gives no interval
    interval = f" [{low:+.2f}, {high:+.2f}]" if low is not None and high is not None else ""
    return f"{estimate.mean:+.2f}{interval} ({len(common)} seed{'s' if len(common) != 1 else ''})"


def run_table(runs: Sequence[RunView]) -> str:
    """One row per run: what it is, what its finished episodes measured and, beside a static
    twin, its paired difference from it."""
    twin = static_twin(runs)
    head = ["run", "command", "controller", "task", "episodes", "test acc (%)", "selection acc (%)"]
    head += ["host params", "seed params", "train GFLOPs"]
    head += ["test − static twin (points, 95% CI)"] if twin else []
    rows = []
    for run in runs:
        done = run.finished_episodes
        row = [run.name, run.command, run.controller, run.task, str(len(done))]
        row += [mean_text([e.final_test_accuracy for e in done], ".2f") or "running"]
        row += [mean_text([e.final_val_accuracy for e in done], ".2f")]
        row += [mean_text([e.host_params for e in done], ",.0f"), mean_text([e.seed_params for e in done], ",.0f")]
        row += [mean_text([e.train_gflops for e in done], ",.0f")]
        row += [against_twin(run, twin)] if twin else []
        rows.append(row)
    paths = "".join(f"<li>{html.escape(run.name)}: {html.escape(str(run.path))}</li>" for run in runs)
    return html_table(head, rows) + f"<ul>{paths}</ul>"


def figure_section(out: Path, name: str, title: str, caption: str, figure: Figure) -> str:
    """Save `figure` as `out/NAME.png` and return its section of the page, the image inlined."""
    data = png_bytes(figure)
    write_atomic(out / f"{name}.png", lambda f: f.write(data))
    encoded = base64.b64encode(data).decode("ascii")
    return (
        f"<h2>{html.escape(title)}</h2><p class=caption>{html.escape(caption)} "
        f'(<a href="{name}.png">{name}.png</a>)</p>'
        f'<img alt="{html.escape(title)}" src="data:image/png;base64,{encoded}">'
    )


def write_page(out: Path, title: str, body: str) -> Path:
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style></head>
<body><h1>{html.escape(title)}</h1>{body}</body></html>
"""
    path = out / "report.html"
    write_atomic(path, lambda f: f.write(page.encode("utf-8")))
    return path


def write_report(runs: Sequence[RunView], out: Path) -> Path:
    """Draw every figure that the runs have data for into `out/NAME.png` and write
    `out/report.html` with them inlined; returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    sections = [figure_section(out, name, title, caption, draw(runs)) for name, title, draw, caption in FIGURES]
    if any(run.rows for run in runs):
        name, title, draw, caption = PPO_FIGURE
        sections.append(figure_section(out, name, title, caption, draw([run for run in runs if run.rows])))
    names = ", ".join(run.name for run in runs)
    return write_page(out, f"Esper report: {names}", run_table(runs) + "".join(sections))


def eval_tables(report: dict[str, Any]) -> str:
    """The controllers' table and the paired differences' table of an eval record."""
    rows = []
    for name, values in report["controllers"].items():
        est = report["test_accuracy"][name]
        low, high = est["ci95"]
        interval = f"[{low:.2f}, {high:.2f}]" if low is not None and high is not None else "(one seed)"
        row = [name, f"{est['mean']:.2f}", interval, f"{added_params(report, name):,.0f}"]
        row += [mean_text(values.get("train_gflops", []), ",.0f"), mean_text(values.get("seconds", []), ".1f")]
        rows.append(row)
    head = ["controller", "test acc (%)", "95% CI", "added params", "train GFLOPs", "s / episode"]
    paired = []
    for pair, est in report["paired"].items():
        low, high = est["ci95"]
        interval = f"[{low:+.2f}, {high:+.2f}]" if low is not None and high is not None else "(one seed)"
        paired.append([pair, f"{est['mean']:+.2f}", interval])
    n = len(report["seeds"])
    return (
        html_table(head, rows)
        + f"<h2>Paired test accuracy differences (points, over {n} seed{'s' if n != 1 else ''})</h2>"
        + html_table(["pair", "mean", "95% CI"], paired)
    )


def write_eval_report(report: dict[str, Any], run_name: str, out: Path) -> Path:
    """The page of an eval run: its controllers, their paired differences and a figure of both."""
    out.mkdir(parents=True, exist_ok=True)
    seeds = report["seeds"]
    intro = (
        f"<p>Task {html.escape(str(report['task']))}, {report.get('max_epochs', '?')} epochs, "
        f"seeds {seeds[0]} to {seeds[-1]} ({len(seeds)}), read from eval.json.</p>"
    )
    figure = figure_section(out, "eval_paired", "Per seed and paired", EVAL_CAPTION, figures.eval_paired(report))
    return write_page(out, f"Esper eval report: {run_name}", intro + eval_tables(report) + figure)
