"""Does this code repeat the frontier's held episodes? A check before mixing commits in one record.

`frontier.py` reuses every episode held in `<out-dir>/episodes.jsonl`, whatever commit ran it,
so a frontier extended to more seeds may mix code versions. That is sound only if the new code
repeats the old episodes exactly. This runs the held episodes of one seed and start width again,
one arm at a time through the frontier's own episode path, and compares test accuracy, final
parameters and training FLOPs with the held rows. CPU episodes repeat only on one machine and
torch build: run it where the held episodes ran.

Writes `<out-dir>/repeat_held_<code>.json` and exits 1 if any episode differs.

Usage: python experiments/growth-frontier/repeat_held.py --task shapes [--seed 200] [--start-width 4]
           [--arms static naive heuristic policy:shapes] [--max-epochs N] [--recipe default] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))  # frontier.py beside this file

import frontier

from esper.karn import write_json_atomic
from esper.karn.rundir import read_jsonl
from esper.runs.common import UsageError, torch_build
from esper.runs.eval_run import run_one
from esper.tolaria import TASKS, get_task

COMPARED = ("test_accuracy", "params", "train_gflops")


def held_row(rows: list[dict[str, Any]], arm: str, width: int, seed: int) -> dict[str, Any]:
    for row in rows:
        if (row["arm"], row["start_width"], row["seed"]) == (arm, width, seed):
            return row
    raise UsageError(f"no held episode of arm {arm!r} from width {width} on seed {seed}")


def compared(held: dict[str, Any], again: dict[str, Any]) -> dict[str, Any]:
    """The held row beside the same episode run again; `same` only if every compared value is."""
    values = {key: {"held": held[key], "again": again[key]} for key in COMPARED}
    same = all(v["held"] == v["again"] for v in values.values())
    where = {"arm": held["arm"], "start_width": held["start_width"], "seed": held["seed"], "held_code": held["code"]}
    return {**where, **values, "same": same}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="shapes", help=f"one of: {' '.join(TASKS)} (default shapes)")
    parser.add_argument("--seed", type=int, default=200)
    parser.add_argument("--start-width", type=int, default=4, help="the cheapest start is quickest (default 4)")
    parser.add_argument("--arms", nargs="+", default=["static", "naive", "heuristic", "policy:shapes"])
    parser.add_argument("--max-epochs", type=int, help="the frontier's episode length (default: the task's)")
    parser.add_argument("--recipe", default="default", choices=list(frontier.RECIPES), help="the held episodes' recipe")
    parser.add_argument("--out-dir", help="the frontier's folder (default: the recipe's, as frontier.py's)")
    args = parser.parse_args(argv)
    try:
        if args.task not in TASKS:
            raise UsageError(f"--task {args.task!r}: choose from: {' '.join(TASKS)}")
        task = get_task(args.task)
        recipe = frontier.RECIPES[args.recipe]
        out = Path(args.out_dir) if args.out_dir else frontier.RESULTS / task.name / recipe.folder
        log = out / "episodes.jsonl"
        if not log.exists():
            raise UsageError(f"no held episodes: {log} does not exist")
        rows = read_jsonl(log)
        held = [held_row(rows, arm, args.start_width, args.seed) for arm in args.arms]
        arms = [frontier.Arm(row["arm"], row["start_width"]) for row in held]
        frontier.check_held_arms(task, held, arms, log, recipe)  # another recipe, knobs or policy differs anyway
        epochs = args.max_epochs or task.max_epochs
        jobs = [frontier.job(task, arm, row["seed"], epochs, recipe) for arm, row in zip(arms, held, strict=True)]
    except UsageError as exc:
        print(f"repeat_held: error: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    version, results = frontier.code_version(), []
    for arm, row, job in zip(arms, held, jobs, strict=True):
        again = frontier.row_of(arm, run_one(job), version, frontier.arm_heuristic(task, arm.name), recipe)
        results.append(compared(row, again))
        print(f"{row['arm']}@{row['start_width']} seed {row['seed']}: same {results[-1]['same']}", flush=True)
    report = {"code": version, "date": time.strftime("%Y-%m-%d"), "threads_per_episode": 1, "episodes": results}
    report["all_same"] = all(r["same"] for r in results)
    report.update(torch_build())
    path = out / f"repeat_held_{version}.json"
    write_json_atomic(path, report)
    print(f"repeat_held: {'every' if report['all_same'] else 'NOT every'} episode repeated; {path}")
    return 0 if report["all_same"] else 1


if __name__ == "__main__":
    sys.exit(main())
