"""`esper report RUN_DIR [RUN_DIR ...]`: the HTML page and PNG figures of one or several
training runs (overlaid; a `static` run among them is the others' twin), or of one eval run."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.karn.evaluation import read_eval
from esper.karn.rundir import RunDirError, RunView, read_run
from esper.runs.common import UsageError
from esper.scripts.parsers import OneLineParser


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    p: OneLineParser = sub.add_parser(
        "report",
        help="write an HTML page and PNG figures of one or several run directories (overlaid), or of an eval run",
    )
    p.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directories of heuristic, grow or ppo runs (a static grow run among them is the others' "
        "twin), or one eval run",
    )
    p.add_argument("--out", help="folder of the page and figures (default: RUN_DIR/report of the first run)")


@dataclass(frozen=True)
class ReportJob:
    runs: list[RunView]
    out: Path
    evaluation: dict[str, Any] | None = None
    """The record of an eval run (then `runs` is empty)."""
    eval_name: str = ""


def resolve_report(args: argparse.Namespace) -> ReportJob:
    evals = [path for path in args.run_dirs if (Path(path) / "eval.json").is_file()]
    if evals and len(args.run_dirs) > 1:
        raise UsageError(f"{evals[0]!r} is an eval run: report draws one eval run alone, or training runs together")
    out = Path(args.out) if args.out else Path(args.run_dirs[0]) / "report"
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {str(out)!r} exists and is not a directory")
    try:
        if evals:
            return ReportJob([], out, read_eval(Path(evals[0])), Path(evals[0]).resolve().name)
        runs = [read_run(path) for path in args.run_dirs]
    except RunDirError as exc:
        raise UsageError(str(exc)) from None
    for path, run in zip(args.run_dirs, runs, strict=True):
        if not run.episodes and not run.rows:
            raise UsageError(f"{path!r} has no epoch yet to report")
    return ReportJob(runs, out)


def run_report(job: ReportJob) -> Path:
    from esper.karn.html import write_eval_report, write_report  # matplotlib only when a report is drawn

    if job.evaluation is not None:
        page = write_eval_report(job.evaluation, job.eval_name, job.out)
        print(f"report of an eval run: {page} (figure beside it)", flush=True)
        return page
    page = write_report(job.runs, job.out)
    print(f"report of {len(job.runs)} run(s): {page} (figures beside it)", flush=True)
    return page
