"""CPU host-epochs per second of two checkouts of Esper, measured in alternating processes.

Why: a change to the training path must not slow the CPU down, and run-to-run noise on a shared
machine (about 10%) is larger than the effects in question; alternating the two checkouts over
several repetitions pairs each measurement with one taken under the same load.

Each measurement runs in a fresh process with one thread, imports `esper` from the checkout's
`src`, builds `--envs` envs of a bare `shapes` host, trains 2 warm-up epochs and times
`--epochs` more. Prints one JSON object (and writes it to `--out`): every repetition's rates,
and the mean ratio of the second checkout over the first per env count.

Usage: python benchmarks/compare_checkouts.py OLD_CHECKOUT NEW_CHECKOUT [--repeats 5] [--envs 1,4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

MEASURE = """
import json, sys, time
import torch
torch.set_num_threads(1)
from esper.leyline import Decision
from esper.simic import morphogenetic_envs as menvs
from esper.tolaria import EnvConfig, get_task
n, epochs = int(sys.argv[1]), int(sys.argv[2])
task, cpu = get_task("shapes"), torch.device("cpu")
config = menvs.TrainerConfig(episodes=10**6, n_envs=n, rng_seed=0)
env_config = EnvConfig(task, cpu, epochs + 2, task.slot_names, max_germinations=6)
envs, _ = menvs.build_trainer(config, env_config, task.load_data(None), [cpu], cpu)
envs.begin_round()
for _ in range(2):
    envs.train_epoch(list(range(n)), [Decision.wait()] * n)
start = time.perf_counter()
for _ in range(epochs):
    envs.train_epoch(list(range(n)), [Decision.wait()] * n)
print(json.dumps(n * epochs / (time.perf_counter() - start)))
"""


def rate(checkout: Path, n_envs: int, epochs: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src"), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(n_envs), str(epochs)], env=env, check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--envs", default="1,4")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    counts = [int(n) for n in args.envs.split(",")]
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for repeat in range(args.repeats):
        order = ("old", "new") if repeat % 2 == 0 else ("new", "old")
        for name in order:
            checkout = args.old if name == "old" else args.new
            runs[name].append({str(n): round(rate(checkout, n, args.epochs), 3) for n in counts})
            print(json.dumps({name: runs[name][-1]}), file=sys.stderr, flush=True)

    def mean_rate(name: str, n: int) -> float:
        return statistics.mean(r[str(n)] for r in runs[name])

    ratio = {str(n): round(mean_rate("new", n) / mean_rate("old", n), 3) for n in counts}
    figures = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "old": str(args.old),
        "new": str(args.new),
        "threads": 1,
        "cpu_count": os.cpu_count(),
        "host_epochs_per_second": runs,
        "new_over_old": ratio,
    }
    text = json.dumps(figures)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
