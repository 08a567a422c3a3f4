"""The command line's grammar: one parser per command, whose flags are the settings of the run
function in `esper.runs` it calls, and the flags every command shares. Only parsing lives here;
validation and the run itself belong to `esper.runs`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from esper.nissa.wandb import INSTALL_HINT
from esper.runs.common import UsageError
from esper.runs.config import HEURISTIC_GROUPS, PPO_GROUPS, Group, group_fields, knobs_parser
from esper.runs.eval_run import CONTROLLER_HELP, EVAL_GROUPS
from esper.runs.grow_run import GROW_CONTROLLERS


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; Esper prints just the error, on one line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        """argparse drops a lone `--` as an option's value (`--episodes=--`) and hands back an
        empty list, unconverted; an option that takes one value refuses it instead."""
        if action.nargs is None and action.option_strings and arg_strings in ([], ["--"]):
            raise UsageError(f"{'/'.join(action.option_strings)}: expected one value, got '--'")
        return super()._get_values(action, arg_strings)


def add_tracking_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--track", action="store_true", default=None, help=f"also log to Weights & Biases ({INSTALL_HINT})"
    )
    parser.add_argument("--wandb-project", help="the W&B project of --track (default esper)")


def knobs_help(groups: dict[str, Group], chosen: Sequence[str] = ()) -> str:
    """The knob flags of the `chosen` groups (all when empty) with their help: `--help-knobs`."""
    text = knobs_parser({name: groups[name] for name in chosen or groups}).format_help()
    body = text[text.index("\n\n") :].strip("\n")
    return "knobs (also settable from --config FILE, as [group] tables):\n" + body


def knob_groups_summary(command: str, groups: dict[str, Group]) -> str:
    """The end of a subcommand's `--help`: one line per knob group, the knobs one step away."""
    lines = [f"knob groups (--GROUP.KNOB VALUE, or a [GROUP] table in --config; `esper {command} --help-knobs GROUP`):"]
    for name, group in groups.items():
        doc = (type(group()).__doc__ or "").strip().splitlines()[0].rstrip(".")
        lines.append(f"  {name:<10} {len(group_fields(group)):>2} knobs: {doc}")
    return "\n".join(lines)


class HelpKnobs(argparse.Action):
    """`--help-knobs [GROUP ...]`: print the knob flags of those groups (all when none) and exit,
    as `--help` does for the settings."""

    def __init__(self, option_strings: Sequence[str], dest: str, groups: dict[str, Group], **kwargs: Any) -> None:
        self.groups = groups
        super().__init__(option_strings, dest, nargs="*", metavar="GROUP", default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        unknown = [v for v in values if v not in self.groups]
        if unknown:
            raise UsageError(f"--help-knobs {unknown[0]!r}: choose from {' '.join(self.groups)}")
        print(knobs_help(self.groups, values))
        parser.exit()


def add_command(
    sub: argparse._SubParsersAction, name: str, help: str, groups: dict[str, Group], one_seed: bool = True
) -> argparse.ArgumentParser:
    """A subcommand whose settings are its flags, with the flags every command shares; its
    `--help` shows the settings and names the knob groups, whose flags `--help-knobs` lists."""
    parser = sub.add_parser(
        name,
        help=help,
        epilog=knob_groups_summary(name, groups),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--help-knobs",
        action=HelpKnobs,
        groups=groups,
        help=f"list the knob flags of these groups (of all when none is named) and exit: {' '.join(groups)}",
    )
    parser.add_argument(
        "--task",
        help="one of: shapes, pydoc, cifar10, textfile; or your own, package.module:function "
        "returning a TaskSpec (docs/own-task.md) (default shapes)",
    )
    parser.add_argument("--max-epochs", type=int, help="host epochs per episode (default: the task's)")
    parser.add_argument("--slots", nargs="+", help="slots the controller may use (default: all of the host's)")
    parser.add_argument("--max-germinations", type=int, help="most germinations per episode; 0: none (default 6)")
    parser.add_argument(
        "--blueprints",
        nargs="+",
        help="blueprints the controller may choose (default: the residual ones; width ones by name: widen_50 ...)",
    )
    if one_seed:
        parser.add_argument(
            "--seed", type=int, help="random seed of the run; episode e trains with seed S + e (default 0)"
        )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        default=None,
        help="CUDA: torch's deterministic kernels, so a seed's run repeats bit for bit on one GPU and torch build "
        "(default off: cuDNN's fastest kernels, whose runs differ; a CPU run repeats either way)",
    )
    parser.add_argument("--data-dir", help="folder of a real dataset (cifar10, textfile); else $ESPER_DATA_DIR")
    parser.add_argument("--config", help="a TOML, YAML or JSON file of settings and [group] tables of knobs")
    parser.add_argument("--run-dir", help=f"where the run is written (default runs/<time>-{name}-<task>)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.set_defaults(settings_parser=parser)  # a config file's settings are read by it (`typed_settings`)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads of this process (default 1: torch's default, one per core, spins against any "
        "other load and ran a 3-epoch run 4x slower on a busy 2-core machine)",
    )
    return parser


def add_growth_parsers(sub: argparse._SubParsersAction) -> None:
    """`esper heuristic` and `esper grow`: one parser each, with the same options."""
    h = add_command(sub, "heuristic", "train with the rule-based controller", HEURISTIC_GROUPS)
    g = add_command(sub, "grow", "train with a given controller: a learned policy, random, ...", HEURISTIC_GROUPS)
    g.add_argument("--controller", help=f"one of: {GROW_CONTROLLERS} (default heuristic)")
    g.add_argument("--sample", action="store_true", default=None, help="a policy samples its actions (default greedy)")
    for p in (h, g):
        p.add_argument("--episodes", type=int, help="independent training runs, seeds S, S+1, ... (default 1)")
        p.add_argument("--device", help="cpu, cuda, cuda:N or mps (default cpu)")
        p.add_argument(
            "--resume",
            choices=["last"],
            help="with --run-dir: continue that run from its first unfinished episode (a fresh start if it has none)",
        )
        add_tracking_flags(p)


def add_ppo_parser(sub: argparse._SubParsersAction) -> None:
    """Every option defaults to None, so a resumed run can tell which ones were given."""
    p = add_command(sub, "ppo", "learn a controller with PPO over vectorized envs", PPO_GROUPS)
    p.add_argument("--episodes", type=int, help="total episodes of the run, counting resumed ones (default 8)")
    p.add_argument("--n-envs", type=int, help="envs stepped together; one round = one episode each (default 4)")
    p.add_argument("--hidden", type=int, help="width of the policy's layers and LSTM (default 128)")
    p.add_argument(
        "--observe-budget",
        action="store_true",
        default=None,
        help="the policy sees the compute budget (needs --gates.compute_budget): the share spent, and per slot "
        "and blueprint whether a germination fits it now",
    )
    add_tracking_flags(p)
    p.add_argument("--device", help="device of the policy, and of the envs unless --devices (default cpu)")
    p.add_argument("--devices", nargs="+", help="devices the envs are spread over, round-robin")
    p.add_argument("--amp", help="mixed precision for the hosts on CUDA: bf16 or fp16 (fp16: one GradScaler per env)")
    add_host_speed_flags(p)
    p.add_argument("--save-every", type=int, help="write a checkpoint every R rounds, and after the last (default 1)")
    p.add_argument(
        "--resume",
        help="continue from this checkpoint, from the latest one of a run directory, or with 'last' from the latest "
        "one of --run-dir, starting fresh if it has none (settings and knobs come from the checkpoint unless given)",
    )
    p.add_argument(
        "--init-policy",
        help="start this new run from a trained policy: a checkpoint, a policy file or a shipped policy's name "
        "(e.g. shapes); its weights, observation statistics and training seeds (which eval refuses and a cloning "
        "skips) carry over, the optimizer and the counters start fresh",
    )
    add_clone_flags(p)


def add_host_speed_flags(p: argparse.ArgumentParser) -> None:
    """How the hosts' work is issued on their device: compiled, or replayed as CUDA graphs."""
    p.add_argument(
        "--compile",
        action="store_const",
        const=True,
        help="torch.compile each host's training forward (recompiles when a seed changes the graph)",
    )
    p.add_argument(
        "--no-cuda-graphs",
        dest="cuda_graphs",
        action="store_const",
        const=False,
        help="launch every kernel of the CUDA hosts from Python instead of replaying CUDA graphs of their training "
        "steps and measurements (same results; for debugging and comparison)",
    )
    p.add_argument(
        "--cuda-graphs",
        dest="cuda_graphs",
        action="store_const",
        const=True,
        help="replay CUDA graphs (the default; turns them back on when resuming a --no-cuda-graphs run)",
    )


def add_clone_flags(p: argparse.ArgumentParser) -> None:
    """The behaviour-cloning warm start (`esper.simic.cloning`)."""
    p.add_argument(
        "--clone-episodes",
        type=int,
        help="warm start: before PPO, clone the heuristic (the task's tuned one; --heuristic.KNOB changes it) from "
        "this many of its episodes (default 0); given with --resume into a new --run-dir, a cloning before the resumed "
        "PPO goes on",
    )
    p.add_argument(
        "--clone-decisions",
        help="which decisions of the heuristic's episodes to clone: all; keep-cull (those about a probationary seed "
        "with a measured contribution: wait, fossilize or cull it); or verdicts (only its fossilizations and culls "
        "of such seeds); or cull (at every step where a seed could be culled, only whether to cull it, and which) "
        "(default all)",
    )
    p.add_argument(
        "--clone-teacher",
        help="whose episodes to clone: heuristic; or sign-culls (the run's own policy, e.g. from --init-policy, "
        "acting greedily, except that it culls a seed on probation whose contribution is <= 0 and never one above) "
        "(default heuristic)",
    )
    p.add_argument(
        "--clone-anchor",
        type=float,
        help="with --clone-decisions cull: weight of KL(start || now) at every step, between the policy's odds "
        "among the ops other than CULL as the cloning begins and as it fits, a penalty that holds when it grows "
        "near where it was (default 0: none)",
    )
    p.add_argument("--clone-steps", type=int, help="full-batch Adam steps of the cloning (default 300)")
    p.add_argument("--clone-lr", type=float, help="learning rate of the cloning (default 1e-3)")


def add_eval_parser(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "eval", "compare controllers paired on held-out seeds", EVAL_GROUPS, one_seed=False)
    p.add_argument(
        "--controllers", nargs="+", help=f"one or more of: {CONTROLLER_HELP} (two or more are compared, paired)"
    )
    p.add_argument("--seeds", help="A:B, the seeds A, A+1, ..., B-1 (as in Python)")
    p.add_argument("--sample", action="store_true", default=None, help="policies sample their actions (default greedy)")
    p.add_argument("--device", help="cpu, cuda, cuda:N or mps (default cpu)")
    p.add_argument(
        "--resume",
        choices=["last"],
        help="with --run-dir: run only the episodes that run directory does not hold yet (a fresh start if none)",
    )
    p.add_argument(
        "--workers", type=int, help="episodes at once, one process each; 0: one by one in this process (default: CPUs)"
    )
