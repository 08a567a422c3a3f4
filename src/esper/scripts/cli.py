"""`esper heuristic|grow|ppo|eval|report|watch [...]`: the command dispatcher.

Each command lives in its own module: `heuristic` and `grow` in `esper.runs.grow_run`, `ppo` in
`esper.runs.ppo_run`, `eval` in `esper.runs.eval_run`, `report` and `watch` in
`esper.scripts.report` and `esper.scripts.watch`. This module parses, calls and turns every
failure into one line and an exit code: 2 for bad input (before anything is written), 1 for a
run that failed, 130 or 143 for a stop by signal.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

import esper
from esper.nissa import TelemetryError
from esper.runs.common import AlreadyFinished, RunFailure, UsageError
from esper.runs.eval_run import resolve_eval, run_eval
from esper.runs.grow_run import resolve_growth, run_growth
from esper.runs.ppo_run import distributed_context, resolve_ppo, run_ppo
from esper.runs.stopping import StopRequested
from esper.scripts.parsers import OneLineParser, add_eval_parser, add_growth_parsers, add_ppo_parser
from esper.scripts.report import add_report_parser, resolve_report, run_report
from esper.scripts.watch import add_watch_parser, resolve_watch, run_watch
from esper.simic.distributed import SINGLE_PROCESS, DistContext, shutdown_distributed
from esper.simic.morphogenetic_envs import EnvFailure


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="esper", description="Grow morphogenetic networks.")
    parser.add_argument("--version", action="version", version=f"esper {esper.__version__} (torch {torch.__version__})")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    add_growth_parsers(sub)
    add_ppo_parser(sub)
    add_eval_parser(sub)
    add_report_parser(sub)
    add_watch_parser(sub)
    return parser


def reject_knobs(rest: Sequence[str]) -> None:
    """A command without knob groups takes no extra flags."""
    if rest:
        raise UsageError(f"unrecognized arguments: {' '.join(rest)}")


def set_threads(threads: int | None) -> None:
    """`--threads`: torch's intra-op CPU threads for this process (the commands that train)."""
    if threads is None:
        return
    cpus = os.cpu_count() or 1
    if not 1 <= threads <= cpus:
        raise UsageError(f"--threads {threads}: choose from 1 to {cpus} (the CPUs of this machine)")
    torch.set_num_threads(threads)


def main(argv: Sequence[str] | None = None) -> int:
    ctx = SINGLE_PROCESS
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        parser.print_help()  # `esper` alone: what it can do, not an error about a missing command
        return 0
    try:
        args, rest = parser.parse_known_args(argv)  # the rest: knob flags (`--ppo.gamma 1`)
        set_threads(getattr(args, "threads", None))
        if args.command == "ppo":
            ctx = distributed_context(args)  # under torchrun: join the group before anything else
        run, execute = resolve(args, rest, ctx)
    except UsageError as exc:
        print(f"esper: error: {exc}", file=sys.stderr)
        shutdown_distributed(graceful=False)
        return 2
    except AlreadyFinished as exc:
        if ctx.is_main:
            print(f"esper: {exc}", flush=True)
        shutdown_distributed(graceful=True)
        return 0
    try:
        execute(run)
    except BaseException as exc:
        shutdown_distributed(graceful=False)
        code = failure_exit_code(exc, ctx.is_main)
        if code is None:
            raise
        return code
    shutdown_distributed()
    return 0


Execute = Callable[[Any], object]


def resolve(args: argparse.Namespace, rest: Sequence[str], ctx: DistContext) -> tuple[Any, Execute]:
    """The command's checked run and the function that executes it."""
    if args.command == "ppo":
        run = resolve_ppo(args, rest, ctx)
        ctx.barrier()  # every rank has checked its arguments before rank 0 writes
        return run, run_ppo
    if args.command == "eval":
        return resolve_eval(args, rest), run_eval
    if args.command in ("report", "watch"):
        reject_knobs(rest)
        return (resolve_report(args), run_report) if args.command == "report" else (resolve_watch(args), run_watch)
    return resolve_growth(args, rest), run_growth


DETERMINISM_REFUSAL = "does not have a deterministic implementation"
"""torch's words when `--deterministic` meets an op with no deterministic kernel."""


def failure_exit_code(exc: BaseException, is_main: bool) -> int | None:
    """The one line and exit code for a run that failed or was stopped; None: not ours to
    report (a bug), re-raised with its traceback."""
    if isinstance(exc, EnvFailure):
        print(f"esper: error: {exc}; the checkpoints written so far are intact (--resume last)", file=sys.stderr)
        return 1
    if isinstance(exc, RunFailure | TelemetryError):
        if is_main or isinstance(exc, TelemetryError):
            print(f"esper: error: {exc}", file=sys.stderr)
        return 1
    if isinstance(exc, RuntimeError) and DETERMINISM_REFUSAL in str(exc):
        first = str(exc).strip().splitlines()[0]
        print(f"esper: error: --deterministic: {first}; run without --deterministic", file=sys.stderr)
        return 1
    if isinstance(exc, StopRequested):
        if is_main:
            print(f"esper: {exc.message}", file=sys.stderr, flush=True)
        return exc.exit_code
    if isinstance(exc, BrokenPipeError):
        # stdout was closed (e.g. `esper heuristic | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    if isinstance(exc, OSError):  # a full or unwritable disk: what was written before stays whole (atomic writes)
        print(f"esper: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1
    return None


if __name__ == "__main__":
    sys.exit(main())
