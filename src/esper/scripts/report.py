"""`esper report RUN_DIR [RUN_DIR ...]`: the HTML page and PNG figures of one or several runs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from esper.karn.rundir import RunDirError, RunView, read_run
from esper.scripts.common import OneLineParser, UsageError, refuse_eval_run


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    p: OneLineParser = sub.add_parser(
        "report", help="write an HTML page and PNG figures of one or several run directories (overlaid)"
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories of heuristic or ppo runs")
    p.add_argument("--out", help="folder of the page and figures (default: RUN_DIR/report of the first run)")


@dataclass(frozen=True)
class ReportJob:
    runs: list[RunView]
    out: Path


def resolve_report(args: argparse.Namespace) -> ReportJob:
    runs = []
    for path in args.run_dirs:
        refuse_eval_run(path, "report")
        try:
            run = read_run(path)
        except RunDirError as exc:
            raise UsageError(str(exc)) from None
        if not run.episodes and not run.rows:
            raise UsageError(f"{path!r} has no epoch yet to report")
        runs.append(run)
    out = Path(args.out) if args.out else runs[0].path / "report"
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {str(out)!r} exists and is not a directory")
    return ReportJob(runs, out)


def run_report(job: ReportJob) -> Path:
    from esper.karn.html import write_report  # matplotlib is imported only when a report is drawn

    page = write_report(job.runs, job.out)
    print(f"report of {len(job.runs)} run(s): {page} (figures beside it)", flush=True)
    return page
