"""`esper watch RUN_DIR`: follow a running (or finished) run live in the terminal."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from esper.karn.rundir import RunDirError, read_run
from esper.runs.common import UsageError, refuse_eval_run
from esper.scripts.parsers import OneLineParser


def add_watch_parser(sub: argparse._SubParsersAction) -> None:
    p: OneLineParser = sub.add_parser("watch", help="follow a run directory live (Ctrl-C detaches; the run goes on)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a heuristic or ppo run directory, running or finished")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    p.add_argument("--once", action="store_true", help="draw the view once and exit")


@dataclass(frozen=True)
class WatchJob:
    path: Path
    interval: float
    once: bool


def resolve_watch(args: argparse.Namespace) -> WatchJob:
    if not args.interval > 0:
        raise UsageError(f"--interval must be > 0 seconds, got {args.interval}")
    refuse_eval_run(args.run_dir, "watch")
    try:
        read_run(args.run_dir)
    except RunDirError as exc:
        raise UsageError(str(exc)) from None
    return WatchJob(Path(args.run_dir), args.interval, args.once)


def run_watch(job: WatchJob) -> int:
    from esper.karn.live_view import watch

    return watch(job.path, job.interval, job.once)
