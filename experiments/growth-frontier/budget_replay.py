"""What a compute budget lets `early` and `mid` grow, epoch by epoch, once `early` has grown a
width seed (or with nothing grown): one `shapes` run driven by hand under v31's gates.

It checks the reading of v31's smaller `mid` seed: grown in `early` at epoch 10, as v31 does,
`widen_50` leaves only `widen_25` affordable in `mid` until fewer epochs are left to pay for,
whatever the reward's parameter price. Run with one thread:

    OMP_NUM_THREADS=1 python experiments/growth-frontier/budget_replay.py --seed 150 --early-epoch 10

Under width 9's training FLOPs (`--budget 1.257`, C_I's), with nothing grown (`--early-epoch 0`),
it shows when each width blueprint first fits (`results/shapes/budget_replay_width9_seed150.txt`).
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from esper.leyline import Decision, GateThresholds, LifecycleOp, SeedStage
from esper.tolaria import EnvConfig, MorphogeneticEnv, get_task


def widths(affordable: tuple[str, ...] | None) -> str:
    """The width blueprints among `affordable` (None: no budget, every blueprint)."""
    return "all" if affordable is None else " ".join(b for b in affordable if b.startswith("widen")) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=150)
    parser.add_argument("--early-epoch", type=int, default=10, help="the epoch `early` grows (0: never)")
    parser.add_argument("--epochs", type=int, default=20, help="epochs to replay (of the run's 40)")
    parser.add_argument(
        "--early-blueprint",
        default="widen_50",
        choices=("widen_25", "widen_50", "widen_100"),
        help="the width blueprint `early` grows",
    )
    parser.add_argument("--budget", type=float, default=1.54, help="--gates.compute_budget (1.54: v31's)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = get_task("shapes")
    gates = dataclasses.replace(
        GateThresholds(), compute_budget=args.budget, probation_cull_contribution=-0.5, fossilize_min_contribution=-0.5
    )
    config = EnvConfig(task, torch.device("cpu"), 40, ("early", "mid", "late"), max_germinations=6, thresholds=gates)
    env = MorphogeneticEnv(config, task.load_data(None))
    signals = env.reset(rng_seed=args.seed)
    print(
        f"shapes seed {args.seed}, budget {args.budget}, "
        + (
            f"{args.early_blueprint} in early at epoch {args.early_epoch}, fossilized on probation"
            if args.early_epoch
            else "nothing grown"
        )
    )
    for epoch in range(1, args.epochs + 1):
        early, mid = signals.slot("early"), signals.slot("mid")
        print(
            f"epoch {epoch:2d}: early {early.stage.name:<12} may grow: early {widths(early.affordable_blueprints)}; "
            f"mid {widths(mid.affordable_blueprints)}"
        )
        if epoch == args.early_epoch:
            decision = Decision(LifecycleOp.GERMINATE, "early", args.early_blueprint)
        elif early.stage is SeedStage.PROBATIONARY and early.epochs_in_stage >= gates.min_probation_epochs:
            decision = Decision(LifecycleOp.FOSSILIZE, "early")
        else:
            decision = Decision.wait()
        signals = env.step(decision).signals


if __name__ == "__main__":
    main()
