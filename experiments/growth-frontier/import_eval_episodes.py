"""Frontier rows from the episodes of an `esper eval` that ran them by the frontier's recipe.

`esper eval` and `frontier.py` run an episode through one path (`run_one`), so an eval episode
of the frontier's recipe, knobs and machine is the frontier's own: running it again costs up to
two minutes of a core for the same numbers. This appends one eval controller's episodes to a
frontier folder as one arm's rows, each naming the eval it came from and the machine it ran on
(the eval's record, not this machine). Nothing here can see the eval's recipe, so run
`repeat_held.py` on one imported episode afterwards: it runs that episode again through the
frontier's own path, on this machine, and must find it the same.

Refused (one line, exit 2): an eval of another length, a static controller whose host is not
the arm's start width, a policy arm whose policy is not the one shipped today, a seed already
held for the arm, or a seed asked for that the eval did not run.

Usage: python experiments/growth-frontier/import_eval_episodes.py EVAL.json EPISODES.jsonl
           --controller NAME --arm ARM --start-width W --code COMMIT --seeds 200:210
           [--task shapes] [--recipe default] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # frontier.py beside this file

import frontier

from esper.karn.rundir import read_jsonl
from esper.runs.common import UsageError
from esper.runs.eval_run import parse_seeds
from esper.simic.checkpoint import policy_sha256
from esper.tolaria import TASKS, TaskSpec, get_task


def imported_rows(
    task: TaskSpec, evaluation: dict[str, Any], episodes: list[dict[str, Any]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """The arm's rows for the seeds asked for; a `UsageError` where the eval cannot be the arm's."""
    recipe, arm = frontier.RECIPES[args.recipe], frontier.Arm(args.arm, args.start_width)
    if evaluation["max_epochs"] != task.max_epochs:
        raise UsageError(f"the eval ran {evaluation['max_epochs']} epochs, the frontier {task.max_epochs}")
    mine = {e["seed"]: e for e in episodes if e["controller"] == args.controller}
    rows = []
    for seed in parse_seeds(args.seeds):
        if seed not in mine:
            raise UsageError(f"--controller {args.controller!r} has no episode of seed {seed} in {args.episodes}")
        result = dict(mine[seed])
        if arm.name == "static" and result["host_params"] != task.host_params(arm.width):
            raise UsageError(f"--controller {args.controller!r} is not a static host of width {arm.width}")
        if arm.name.startswith("policy:"):
            played = evaluation["policy_sha256"].get(args.controller)
            if played != policy_sha256(frontier._policy_path(arm.name.partition("~")[0])):
                raise UsageError(f"{args.controller!r} was played by another policy than today's {arm.name}")
            result["policy_sha256"] = played
        row = frontier.row_of(arm, result, args.code, frontier.arm_heuristic(task, arm.name), recipe)
        for key in ("torch", "cpu_capability", "cpu"):  # the machine the eval ran on, not this one
            row.pop(key, None)
            if key in evaluation:
                row[key] = evaluation[key]
        rows.append({**row, "imported_from": Path(args.evaluation).name})
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("evaluation", help="the eval's eval.json (its length, policy hashes, machine)")
    parser.add_argument("episodes", help="the eval's episodes, one JSON line each")
    parser.add_argument("--controller", required=True, help="the eval's controller (as in its table)")
    parser.add_argument("--arm", required=True, help="the frontier arm its episodes become")
    parser.add_argument("--start-width", type=int, required=True)
    parser.add_argument("--code", required=True, help="the commit the eval ran at")
    parser.add_argument("--seeds", required=True, help="A:B, the seeds to import")
    parser.add_argument("--task", default="shapes", choices=list(TASKS))
    parser.add_argument("--recipe", default="default", choices=list(frontier.RECIPES))
    parser.add_argument("--out-dir", help="the frontier's folder (default: the recipe's, as frontier.py's)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    task = get_task(args.task)
    recipe = frontier.RECIPES[args.recipe]
    out = Path(args.out_dir) if args.out_dir else frontier.RESULTS / task.name / recipe.folder
    log = out / "episodes.jsonl"
    try:
        evaluation = json.loads(Path(args.evaluation).read_text())
        rows = imported_rows(task, evaluation, read_jsonl(Path(args.episodes)), args)
        held = read_jsonl(log) if log.exists() else []
        frontier.check_held_arms(task, held + rows, [frontier.Arm(args.arm, args.start_width)], log, recipe)
        taken = {(r["arm"], r["start_width"], r["seed"]) for r in held}
        twice = [r["seed"] for r in rows if (r["arm"], r["start_width"], r["seed"]) in taken]
        if twice:
            raise UsageError(f"{log} already holds {args.arm}@{args.start_width} on seeds {twice}")
    except (OSError, json.JSONDecodeError, UsageError) as exc:
        print(f"import_eval_episodes: error: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    with log.open("a") as sink:
        sink.writelines(json.dumps(row) + "\n" for row in rows)
    print(f"import_eval_episodes: {len(rows)} episodes of {args.controller} as {args.arm}@{args.start_width} -> {log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
