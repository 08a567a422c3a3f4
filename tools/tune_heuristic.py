"""Tune the heuristic: a two-stage random search of its main knobs on training seeds.

Why: a learned controller is only worth its training if it beats a heuristic that was given the
same chance to fit the task. The search reads only what a decision may read: each candidate is
scored by the objective the learned controller's reward is built on (`esper.simic.rewards`),

    J = final selection accuracy (points) - param_price x seed parameters / host parameters,

averaged over the search seeds; the test split is never recorded here. Keep the search seeds
apart from the seeds a comparison reports on (`esper eval --seeds`).

Stage 1 scores `--candidates` configurations (the built-in defaults first, then random draws
from `SPACE`) on `--seeds`; stage 2 runs the best `--finalists` of them on `--confirm-seeds`
as well, and the best mean J over both stages wins (a lucky stage-1 draw has to hold up on new
seeds). Each episode runs in its own single-thread worker process.

Writes the whole search (every candidate, every seed) as JSON to `--out`, prints the ranking,
and with `--write-default` stores the winner as the task's tuned heuristic
(`src/esper/tamiyo/tuned/<task>.json`), which every command then uses as the heuristic's defaults.

`--blueprints` names the blueprints the rotations are drawn from, first preferred (default: the
topology's residual blueprints, most parameters first); naming width blueprints (`widen_25
widen_50 conv_heavy ...`) lets the search choose to grow width first. Every slot must take each
one; a name the topology or a slot refuses is one line, exit code 2.

Usage: python tools/tune_heuristic.py [--task shapes] [--seeds 100:102] [--confirm-seeds 102:106]
       [--candidates 14] [--finalists 4] [--blueprints NAME ...] [--workers 2] [--out FILE]
       [--write-default]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from esper.karn import estimate
from esper.leyline import GateThresholds
from esper.runs.common import UsageError, check_blueprints_fit, resolve_blueprints, resolve_task, torch_build
from esper.runs.config import jsonable
from esper.runs.grow_run import DEFAULT_MAX_GERMINATIONS
from esper.simic.rewards import RewardConfig
from esper.tamiyo import PREFERRED_BLUEPRINTS, HeuristicConfig, HeuristicController
from esper.tamiyo.heuristic import TUNED_DIR
from esper.tolaria import EnvConfig, MorphogeneticEnv, TaskSpec, get_task
from esper.tolaria.episode import run_episode


def blueprint_orders(preferred: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Each blueprint as first choice, the others after it in the preferred order."""
    return [(first, *(b for b in preferred if b != first)) for first in preferred]


SPACE: dict[str, list[Any]] = {
    "warmup_epochs": [0, 1, 2, 4, 8],
    "plateau_patience": [0, 1, 2, 3],
    "germination_cooldown": [0, 1, 2, 4],
    "fossilize_threshold": [0.0, 0.25, 0.5, 1.0],
    "cull_threshold": [-1.0, -0.5, 0.0],
    "blending_cull_threshold": [-5.0, -3.0, -1.0],
    "schedule": ["LINEAR", "SIGMOID"],
}
"""The knobs searched and their values (the rest keep their defaults); `blueprint_order` is
searched too, over `blueprint_orders` of the task's topology."""


def candidates(n: int, preferred: tuple[str, ...], rng: random.Random) -> list[dict[str, Any]]:
    """The built-in defaults, then `n - 1` distinct random draws from the space."""
    default = jsonable(dataclasses.asdict(HeuristicConfig()))
    default["blueprint_order"] = list(preferred)
    chosen = [{k: default[k] for k in [*SPACE, "blueprint_order"]}]
    orders = [list(o) for o in blueprint_orders(preferred)]
    while len(chosen) < n:
        draw = {k: rng.choice(values) for k, values in SPACE.items()}
        draw["blueprint_order"] = rng.choice(orders)
        if draw not in chosen:
            chosen.append(draw)
    return chosen


def candidate_heuristic(task: TaskSpec, knobs: dict[str, Any], thresholds: GateThresholds) -> HeuristicController:
    """A candidate's heuristic, allowed exactly the blueprints of its rotation (the residual ones
    it leaves out stay out, the width ones it names are grown)."""
    config = HeuristicConfig().with_knobs(knobs)
    return HeuristicController(task.topology, task.slot_names, config.blueprint_order, config, thresholds)


def episode(task_name: str, index: int, knobs: dict[str, Any], rng_seed: int, max_epochs: int) -> dict[str, Any]:
    """One episode of one candidate; runs in a worker process. Records no test accuracy."""
    torch.set_num_threads(1)
    task = get_task(task_name)
    data = task.load_data(task.resolve_data_dir(None))
    config = EnvConfig(task, torch.device("cpu"), max_epochs, task.slot_names, DEFAULT_MAX_GERMINATIONS)
    controller = candidate_heuristic(task, knobs, config.thresholds)
    outcome = run_episode(MorphogeneticEnv(config, data), controller, rng_seed=rng_seed, episode=rng_seed)
    price = RewardConfig().param_price
    return {
        "candidate": index,
        "seed": rng_seed,
        "val_accuracy": round(outcome.final_val_accuracy, 3),
        "seed_params": outcome.seed_params,
        "objective": round(outcome.final_val_accuracy - price * outcome.seed_params / outcome.host_params, 4),
        "fossilized": sum(r.final_stage == "FOSSILIZED" for r in outcome.records),
        "culled": sum(r.final_stage == "CULLED" for r in outcome.records),
        "seconds": round(outcome.seconds, 1),
    }


def run_stage(pool, task: str, knobs: list[dict], indices: list[int], seeds: list[int], epochs: int) -> list[dict]:
    futures = [pool.submit(episode, task, i, knobs[i], s, epochs) for i in indices for s in seeds]
    done = []
    for future in concurrent.futures.as_completed(futures):
        row = future.result()
        done.append(row)
        print(
            f"  candidate {row['candidate']:2d} seed {row['seed']}: J {row['objective']:6.2f} "
            f"(val {row['val_accuracy']:.2f}%, +{row['seed_params']:,} params) {row['seconds']:.0f} s "
            f"[{len(done)}/{len(futures)}]",
            file=sys.stderr,
            flush=True,
        )
    return done


def ranking(rows: list[dict], n: int) -> list[dict[str, Any]]:
    """Candidates by mean objective over every seed they ran on, best first."""
    table = []
    for i in range(n):
        mine = [r for r in rows if r["candidate"] == i]
        if mine:
            table.append(
                {
                    "candidate": i,
                    "seeds": len(mine),
                    "objective": estimate([r["objective"] for r in mine]).to_json(),
                    "val_accuracy": round(statistics.fmean(r["val_accuracy"] for r in mine), 3),
                    "seed_params": round(statistics.fmean(r["seed_params"] for r in mine)),
                }
            )
    return sorted(table, key=lambda t: (-t["seeds"], -t["objective"]["mean"]))


def parse_seeds(spec: str) -> list[int]:
    start, _, stop = spec.partition(":")
    try:
        seeds = list(range(int(start), int(stop)))
    except ValueError:
        seeds = []
    if not seeds:
        raise UsageError(f"empty seed range {spec!r}: give A:B with A < B")
    return seeds


def spread(std: float | None) -> str:
    """A standard deviation as printed; one seed has none (null in the report)."""
    return "-" if std is None else f"{std:.2f}"


def preferred_blueprints(task: TaskSpec, names: list[str] | None) -> tuple[str, ...]:
    """The blueprints the search draws rotations from, first preferred; each checked against
    the topology and every slot (a `UsageError` naming the bad one)."""
    preferred = resolve_blueprints(task, names, PREFERRED_BLUEPRINTS[task.topology])
    if len(set(preferred)) != len(preferred):
        raise UsageError(f"--blueprints {' '.join(preferred)}: a blueprint is named twice")
    check_blueprints_fit(task, None, task.slot_names, preferred, flag="--blueprints")
    return preferred


def main() -> None:
    try:
        search(sys.argv[1:])
    except UsageError as exc:
        print(f"tune_heuristic: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def search(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="shapes")
    parser.add_argument("--seeds", default="100:102", help="stage-1 seeds, A:B")
    parser.add_argument("--confirm-seeds", default="102:106", help="stage-2 seeds, A:B")
    parser.add_argument("--candidates", type=int, default=14)
    parser.add_argument("--finalists", type=int, default=4)
    parser.add_argument("--max-epochs", type=int, default=None)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--blueprints", nargs="+", metavar="NAME", help="rotations drawn from these, first preferred (default residual)"
    )
    parser.add_argument("--search-seed", type=int, default=0, help="seed of the random draws")
    parser.add_argument("--out", default=None, help="default: tools/results/tune_heuristic_<task>.json")
    parser.add_argument("--write-default", action="store_true", help="store the winner as the task's tuned heuristic")
    args = parser.parse_args(argv)
    counts = {"--candidates": args.candidates, "--finalists": args.finalists, "--workers": args.workers}
    for flag, value in counts.items():
        if value < 1:
            raise UsageError(f"{flag} {value}: give at least 1")
    if args.max_epochs is not None and args.max_epochs < 1:
        raise UsageError(f"--max-epochs {args.max_epochs}: give at least 1")
    if args.out and Path(args.out).is_dir():
        raise UsageError(f"--out {args.out}: a folder; give a file name for the search's JSON")
    task = resolve_task(args.task)
    epochs = args.max_epochs or task.max_epochs
    seeds, confirm = parse_seeds(args.seeds), parse_seeds(args.confirm_seeds)
    preferred = preferred_blueprints(task, args.blueprints)
    knobs = candidates(args.candidates, preferred, random.Random(args.search_seed))
    start = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        print(f"stage 1: {len(knobs)} candidates x seeds {seeds}", file=sys.stderr, flush=True)
        rows = run_stage(pool, task.name, knobs, list(range(len(knobs))), seeds, epochs)
        finalists = [t["candidate"] for t in ranking(rows, len(knobs))[: args.finalists]]
        print(f"stage 2: candidates {finalists} x seeds {confirm}", file=sys.stderr, flush=True)
        rows += run_stage(pool, task.name, knobs, finalists, confirm, epochs)
    table = ranking(rows, len(knobs))
    best = table[0]["candidate"]
    report = {
        "task": task.name,
        "max_epochs": epochs,
        "objective": f"selection accuracy - {RewardConfig().param_price} x seed params / host params",
        "seeds": seeds,
        "confirm_seeds": confirm,
        "blueprints": list(preferred),
        "candidates": knobs,
        "ranking": table,
        "episodes": sorted(rows, key=lambda r: (r["candidate"], r["seed"])),
        "best": best,
        "best_knobs": knobs[best],
        "seconds": round(time.perf_counter() - start, 1),
        "date": time.strftime("%Y-%m-%d"),
        **torch_build(),
    }
    out = Path(args.out or f"tools/results/tune_heuristic_{task.name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for t in table:
        est = t["objective"]
        print(
            f"candidate {t['candidate']:2d}: J {est['mean']:6.2f} ± {spread(est['std'])} over {t['seeds']} seeds, "
            f"val {t['val_accuracy']:.2f}%, +{t['seed_params']:,} params  {json.dumps(knobs[t['candidate']])}"
        )
    if args.write_default:
        TUNED_DIR.mkdir(exist_ok=True)
        command = "python tools/tune_heuristic.py " + " ".join(argv)
        tuned = {"task": task.name, "heuristic": knobs[best], "search": {"command": command, "report": str(out)}}
        (TUNED_DIR / f"{task.name}.json").write_text(json.dumps(tuned, indent=1) + "\n", encoding="utf-8")
        print(f"tuned heuristic for {task.name} written to {TUNED_DIR / f'{task.name}.json'}")


if __name__ == "__main__":
    main()
