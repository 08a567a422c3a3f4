"""Does growth pay? Three arms on the same seeds, compared paired on the test split.

- grown: the task's (tuned) heuristic controller with every slot and the default germination budget;
- static: the same host, never grown (`max_germinations` 0);
- matched: a static host widened to about the grown arm's mean parameter count (host plus kept
  seeds), trained from the start: is growing better than simply starting bigger?

Every arm of a seed sees the same data order (and grown and static the same initial host). Each
episode runs in its own worker process with one thread (two single-thread processes do twice the
work of one two-thread process on these small convolutions). Prints one JSON object: per arm and
seed the test and selection accuracy, parameters, and the grown arm's fossilized and culled
seeds; per arm the mean test accuracy with its 95% interval; and the paired differences.

Usage: python experiments/growth-frontier/growth.py [--task shapes] [--seeds 0:5] [--max-epochs E] [--workers N]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import statistics
import sys
import time

import torch

from esper.karn import estimate, paired_difference
from esper.runs.common import torch_build
from esper.runs.grow_run import DEFAULT_MAX_GERMINATIONS
from esper.tamiyo import HeuristicController, tuned_heuristic
from esper.tolaria import EnvConfig, MorphogeneticEnv, get_task
from esper.tolaria.episode import run_episode


def episode(task_name: str, arm: str, rng_seed: int, max_epochs: int, host_width: int | None) -> dict:
    """One episode of one arm; runs in a worker process."""
    torch.set_num_threads(1)
    task = get_task(task_name)
    data = task.load_data(task.resolve_data_dir(None))
    slots = task.slot_names
    max_germinations = DEFAULT_MAX_GERMINATIONS if arm == "grown" else 0
    # No warm-up: the recipe of this record (2026-11-23); shapes has warmed up by default since 2026-11-28.
    config = EnvConfig(
        task, torch.device("cpu"), max_epochs, slots, max_germinations, host_width=host_width, lr_warmup_epochs=0
    )
    controller = HeuristicController(
        task.topology, slots, config=tuned_heuristic(task.name), thresholds=config.thresholds
    )
    outcome = run_episode(MorphogeneticEnv(config, data), controller, rng_seed=rng_seed, episode=rng_seed)
    return {
        "arm": arm,
        "seed": rng_seed,
        "test_accuracy": round(outcome.final_test_accuracy, 2),
        "val_accuracy": round(outcome.final_val_accuracy, 2),
        "params": outcome.host_params + outcome.seed_params,
        "fossilized": sum(r.final_stage == "FOSSILIZED" for r in outcome.records),
        "culled": sum(r.final_stage == "CULLED" for r in outcome.records),
        "seconds": round(outcome.seconds, 1),
    }


def run_arm(pool, task: str, arm: str, seeds: list[int], epochs: int, width: int | None) -> list[dict]:
    futures = [pool.submit(episode, task, arm, seed, epochs, width) for seed in seeds]
    results = []
    for future in concurrent.futures.as_completed(futures):
        r = future.result()
        print(f"{arm} seed {r['seed']}: test {r['test_accuracy']:.2f}%  params {r['params']:,}", file=sys.stderr)
        results.append(r)
    return sorted(results, key=lambda r: r["seed"])


def parse_seeds(spec: str) -> list[int]:
    start, _, stop = spec.partition(":")
    seeds = list(range(int(start), int(stop)))
    if len(seeds) < 2:
        raise SystemExit(f"--seeds {spec!r}: a paired comparison needs at least 2 seeds")
    return seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="shapes")
    parser.add_argument("--seeds", default="0:5", help="A:B, as in Python: A included, B not (default 0:5)")
    parser.add_argument("--max-epochs", type=int, default=None)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    task = get_task(args.task)
    seeds = parse_seeds(args.seeds)
    epochs = args.max_epochs or task.max_epochs
    start = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        arms = {
            "grown": run_arm(pool, task.name, "grown", seeds, epochs, None),
            "static": run_arm(pool, task.name, "static", seeds, epochs, None),
        }
        grown_params = round(statistics.fmean(r["params"] for r in arms["grown"]))
        width = task.width_for_params(grown_params)
        arms["matched"] = run_arm(pool, task.name, "matched", seeds, epochs, width)
    test = {arm: [r["test_accuracy"] for r in results] for arm, results in arms.items()}
    pairs = (("grown", "static"), ("matched", "static"), ("grown", "matched"))
    print(
        json.dumps(
            {
                "task": task.name,
                "epochs": epochs,
                "seeds": seeds,
                "host_width": task.host_width,
                "matched_width": width,
                "grown_mean_params": grown_params,
                "test_accuracy": {arm: estimate(values).to_json() for arm, values in test.items()},
                "paired_test_difference": {
                    f"{a} - {b}": paired_difference(test[a], test[b]).to_json() for a, b in pairs
                },
                "episodes": {
                    arm: {key: [r[key] for r in results] for key in results[0] if key not in ("arm", "seed")}
                    for arm, results in arms.items()
                },
                "seconds": round(time.perf_counter() - start, 1),
                **torch_build(),
            }
        )
    )


if __name__ == "__main__":
    main()
