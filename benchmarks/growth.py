"""Does growth pay? Final validation accuracy of the heuristic with all slots vs the static host.

Both arms use the same task, seeds, epochs and host; the only difference is `max_seeds`
(the CLI default vs 0). Prints one JSON object with `grown_mean` and `static_mean`.

Usage: python benchmarks/growth.py [--task shapes] [--seeds 3] [--max-epochs E]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from esper.scripts.train import DEFAULT_MAX_SEEDS
from esper.tamiyo import HeuristicController
from esper.tolaria import EnvConfig, MorphogeneticEnv, get_task
from esper.tolaria.episode import run_episode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="shapes")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-epochs", type=int, default=None)
    args = parser.parse_args()
    task = get_task(args.task)
    data = task.load_data(task.resolve_data_dir(None))
    epochs = args.max_epochs or task.max_epochs
    slots = tuple(s.name for s in task.build_host().slot_ids)
    results: dict[str, list[float]] = {"grown": [], "static": []}
    seed_counts: list[int] = []
    start = time.perf_counter()
    for seed in range(args.seeds):
        for arm, max_seeds in (("grown", DEFAULT_MAX_SEEDS), ("static", 0)):
            config = EnvConfig(task, torch.device("cpu"), epochs, slots, max_seeds)
            controller = HeuristicController(task.topology, slots, thresholds=config.thresholds)
            outcome = run_episode(MorphogeneticEnv(config, data), controller, seed=seed, episode=seed)
            results[arm].append(round(outcome.final_val_accuracy, 2))
            if arm == "grown":
                seed_counts.append(sum(r.final_stage == "FOSSILIZED" for r in outcome.records))
    print(
        json.dumps(
            {
                "task": task.name,
                "epochs": epochs,
                "seeds": list(range(args.seeds)),
                "grown_mean": round(statistics.fmean(results["grown"]), 3),
                "static_mean": round(statistics.fmean(results["static"]), 3),
                "grown": results["grown"],
                "static": results["static"],
                "fossilized_per_episode": seed_counts,
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
