"""`esper report`: one self-contained HTML page (images inlined, no script, no server) and the
PNG figures behind it, for one run directory or several overlaid."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import fmean

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from esper.karn import figures
from esper.karn.files import write_atomic
from esper.karn.rundir import RunView

FIGURES: tuple[tuple[str, str, Callable[[Sequence[RunView]], Figure]], ...] = (
    ("host_accuracy", "Host accuracy per epoch", figures.host_accuracy),
    ("swimlanes", "Slots over the last episode", figures.swimlanes),
    ("contributions", "Seed contributions", figures.contributions),
)
PPO_FIGURE = ("ppo_rounds", "PPO, per round", figures.ppo_rounds)


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()


def run_table(runs: Sequence[RunView]) -> str:
    """One row per run: what it is and what its finished episodes measured."""
    rows = []
    for run in runs:
        done = run.finished_episodes
        test = f"{fmean(e.final_test_accuracy for e in done):.2f}" if done else "running"  # type: ignore[misc]
        val = f"{fmean(e.final_val_accuracy for e in done):.2f}" if done else ""  # type: ignore[misc]
        params = f"{fmean(e.seed_params for e in done):,.0f}" if done else ""  # type: ignore[misc]
        cells = [run.name, run.command, run.task, str(len(done)), test, val, params, str(run.path)]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in ("run", "command", "task", "episodes", "test acc (%)", "selection acc (%)", "seed params", "path")
    )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def write_report(runs: Sequence[RunView], out: Path) -> Path:
    """Draw every figure that the runs have data for into `out/NAME.png` and write
    `out/report.html` with them inlined; returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    chosen = list(FIGURES) + ([PPO_FIGURE] if any(run.rows for run in runs) else [])
    sections = []
    for name, title, draw in chosen:
        data = png_bytes(draw([run for run in runs if run.rows] if name == PPO_FIGURE[0] else runs))
        write_atomic(out / f"{name}.png", lambda f, data=data: f.write(data))
        encoded = base64.b64encode(data).decode("ascii")
        sections.append(
            f'<h2>{html.escape(title)}</h2><p><a href="{name}.png">{name}.png</a></p>'
            f'<img alt="{html.escape(title)}" src="data:image/png;base64,{encoded}">'
        )
    names = ", ".join(run.name for run in runs)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Esper report: {html.escape(names)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;font-size:13px}}img{{max-width:100%}}</style></head>
<body><h1>Esper report</h1>{run_table(runs)}{"".join(sections)}</body></html>
"""
    path = out / "report.html"
    write_atomic(path, lambda f: f.write(page.encode("utf-8")))
    return path
