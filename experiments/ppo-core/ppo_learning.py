"""Does PPO learn on the real environment? Episode return early vs late, and whether V explains it.

Runs `esper ppo` on the embedded image task for `--rounds` rounds of `--n-envs` episodes and
prints one JSON object: `first_quarter_return` and `last_quarter_return` (mean episodic return
over the first and last quarter of rounds: with the default reward, 0.1 x the objective gain of
an episode), `explained_variance` (the last round's), the test and selection accuracy of the
first and last quarters, and the run directory, which keeps metrics.jsonl, summary.json and
checkpoints for inspection.

Episodes are shorter than the task's default (`--max-epochs 20`) so that enough rounds fit in
a CPU budget; the lifecycle still has time to fossilize seeds germinated in the first half.

Usage: python experiments/ppo-core/ppo_learning.py [--rounds 12] [--n-envs 4] [--max-epochs 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import esper.runs


def quarter_means(values: list[float]) -> tuple[float, float]:
    quarter = max(1, math.ceil(len(values) / 4))
    return statistics.fmean(values[:quarter]), statistics.fmean(values[-quarter:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="shapes")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--max-epochs", type=int, default=20)
    parser.add_argument("--reward-mode", default="dense")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", default=None, help="default: a new temporary folder")
    args = parser.parse_args()
    run_dir = Path(args.run_dir) if args.run_dir else Path(tempfile.mkdtemp(prefix="esper-ppo-learning-")) / "run"
    start = time.perf_counter()
    sys.stdout = sys.stderr  # the run's own progress goes to stderr; stdout carries only the JSON
    try:
        esper.runs.ppo(
            task=args.task,
            episodes=args.rounds * args.n_envs,
            n_envs=args.n_envs,
            max_epochs=args.max_epochs,
            seed=args.seed,
            run_dir=run_dir,
            # No warm-up: the recipe of this experiment's records (shapes' default since 2026-11-28 has one).
            knobs={"reward": {"mode": args.reward_mode}, "host": {"lr_warmup_epochs": 0}},
        )
    except esper.runs.UsageError as error:
        print(f"ppo_learning: error: {error}", file=sys.stderr)
        return 2
    finally:
        sys.stdout = sys.__stdout__
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    returns = [r["charts/episodic_return"] for r in rows]
    first, last = quarter_means(returns)
    result = {
        "task": args.task,
        "rounds": len(rows),
        "episodes": rows[-1]["episodes"],
        "max_epochs": args.max_epochs,
        "first_quarter_return": round(first, 4),
        "last_quarter_return": round(last, 4),
        "explained_variance": round(rows[-1]["losses/explained_variance"], 4),
        "first_quarter_test_accuracy": round(quarter_means([r["charts/final_test_accuracy"] for r in rows])[0], 3),
        "last_quarter_test_accuracy": round(quarter_means([r["charts/final_test_accuracy"] for r in rows])[1], 3),
        "first_quarter_val_accuracy": round(quarter_means([r["charts/final_val_accuracy"] for r in rows])[0], 3),
        "last_quarter_val_accuracy": round(quarter_means([r["charts/final_val_accuracy"] for r in rows])[1], 3),
        "last_round_fossilized": rows[-1]["charts/fossilized_seeds"],
        "last_round_entropy": {k.split("_", 1)[1]: round(v, 4) for k, v in rows[-1].items() if "entropy_" in k},
        "last_round_op_mix": {k.split("op_", 1)[1]: round(v, 3) for k, v in rows[-1].items() if "/op_" in k},
        "seconds": round(time.perf_counter() - start, 1),
        "run_dir": str(run_dir),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
