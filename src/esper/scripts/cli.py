"""`esper heuristic|grow|ppo|eval|report|watch [...]`: the command dispatcher.

Each command lives in its own module: `heuristic` and `grow` in `esper.scripts.grow`, `ppo` in
`esper.scripts.ppo`, `eval` in `esper.scripts.evaluate`, `report` and `watch` in
`esper.scripts.report` and `esper.scripts.watch`. This module parses, calls and turns every
failure into one line and an exit code: 2 for bad input (before anything is written), 1 for a
run that failed, 130 or 143 for a stop by signal.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import torch

import esper
from esper.nissa import TelemetryError
from esper.scripts.common import AlreadyFinished, OneLineParser, RunFailure, UsageError
from esper.scripts.evaluate import add_eval_parser, resolve_eval, run_eval
from esper.scripts.grow import add_growth_parsers, resolve_growth, run_growth
from esper.scripts.ppo import add_ppo_parser, distributed_context, resolve_ppo, run_ppo
from esper.scripts.report import add_report_parser, resolve_report, run_report
from esper.scripts.stopping import StopRequested
from esper.scripts.watch import add_watch_parser, resolve_watch, run_watch
from esper.simic.distributed import SINGLE_PROCESS, shutdown_distributed
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
            run, execute = resolve_ppo(args, rest, ctx), run_ppo
            ctx.barrier()  # every rank has checked its arguments before rank 0 writes
        elif args.command == "eval":
            run, execute = resolve_eval(args, rest), run_eval
        elif args.command == "report":
            reject_knobs(rest)
            run, execute = resolve_report(args), run_report
        elif args.command == "watch":
            reject_knobs(rest)
            run, execute = resolve_watch(args), run_watch
        else:
            run, execute = resolve_growth(args, rest), run_growth
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
    except EnvFailure as exc:
        print(f"esper: error: {exc}; the checkpoints written so far are intact (--resume last)", file=sys.stderr)
        shutdown_distributed(graceful=False)
        return 1
    except RunFailure as exc:
        if ctx.is_main:
            print(f"esper: error: {exc}", file=sys.stderr)
        shutdown_distributed(graceful=False)
        return 1
    except StopRequested as exc:
        if ctx.is_main:
            print(f"esper: {exc.message}", file=sys.stderr, flush=True)
        shutdown_distributed(graceful=False)
        return exc.exit_code
    except TelemetryError as exc:
        print(f"esper: error: {exc}", file=sys.stderr)
        shutdown_distributed(graceful=False)
        return 1
    except BrokenPipeError:
        # stdout was closed (e.g. `esper heuristic | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        shutdown_distributed(graceful=False)
        return 1
    except OSError as exc:  # a full or unwritable disk: what was written before stays whole (atomic writes)
        print(f"esper: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        shutdown_distributed(graceful=False)
        return 1
    except BaseException:
        shutdown_distributed(graceful=False)
        raise
    shutdown_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
