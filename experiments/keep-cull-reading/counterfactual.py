"""Does the counterfactual measure the seed? Three readings of one seed's contribution.

A seed is germinated at epoch `--germinate-at` and read at epoch `--read-at` of a `shapes`
episode (the gates are set to keep it alive until then, whatever it reads):

- stale: the measurement before issue 8: accuracy with the seed minus accuracy with alpha forced
  to 0, both under the module's own running BatchNorm statistics, collected with the seed in
  place;
- honest: Esper's contribution (each arm with statistics of its own network);
- culled: the real thing, measured independently: the model as it is, and a copy with the seed
  culled, each with every BatchNorm layer re-settled by PyTorch's `update_bn` on 4,000 training
  images; the difference of their accuracies.

Prints one JSON object with a row per (blueprint, slot).

Usage: python experiments/keep-cull-reading/counterfactual.py [--cases norm:mid conv_heavy:mid norm:late] [--seed 0]
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch
from torch.optim.swa_utils import update_bn

from esper.kasmina import MorphogeneticModel
from esper.leyline import BlendSchedule, Decision, GateThresholds, LifecycleOp
from esper.runs.common import torch_build
from esper.tolaria import EnvConfig, MorphogeneticEnv, get_task
from esper.tolaria.datasets import ImageData

KEEP_ALIVE = GateThresholds(probation_timeout_epochs=100, probation_cull_contribution=-100.0)


@torch.no_grad()
def accuracy(model: MorphogeneticModel, data: ImageData, overrides=None) -> float:
    model.eval()
    correct = sum((model(x, overrides).argmax(-1) == y).sum().item() for x, y in data.val_batches(500))
    return 100.0 * correct / data.val_x.shape[0]


def resettled(model: MorphogeneticModel, data: ImageData, cull: str | None) -> float:
    arm = copy.deepcopy(model)
    if cull is not None:
        arm.slot(cull).cull("benchmark: the real cull")
    update_bn([data.train_x[i : i + 500] for i in range(0, 4000, 500)], arm)
    return accuracy(arm, data)


def reading(blueprint: str, slot: str, germinate_at: int, read_at: int, rng_seed: int) -> dict:
    task = get_task("shapes")
    data = task.load_data(None)
    slots = task.slot_names
    # No warm-up: the recipe of this record; shapes has warmed up by default since 2026-11-28.
    config = EnvConfig(task, torch.device("cpu"), 40, slots, 6, thresholds=KEEP_ALIVE, lr_warmup_epochs=0)
    env = MorphogeneticEnv(config, data)
    env.reset(rng_seed)
    for epoch in range(1, read_at + 1):
        grow = epoch == germinate_at
        result = env.step(
            Decision(LifecycleOp.GERMINATE, slot, blueprint, BlendSchedule.LINEAR) if grow else Decision.wait()
        )
    signals = result.signals
    model = env.model
    return {
        "blueprint": blueprint,
        "slot": slot,
        "stage": signals.slot(slot).stage.name,
        "val_accuracy": round(signals.val_accuracy, 2),
        "stale": round(accuracy(model, data) - accuracy(model, data, {slot: 0.0}), 2),
        "honest": round(signals.slot(slot).contribution, 2),
        "culled": round(resettled(model, data, None) - resettled(model, data, slot), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=["norm:mid", "conv_heavy:mid", "norm:late"])
    parser.add_argument("--germinate-at", type=int, default=2)
    parser.add_argument("--read-at", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [reading(*case.split(":"), args.germinate_at, args.read_at, args.seed) for case in args.cases]
    print(
        json.dumps(
            {
                "germinate_at": args.germinate_at,
                "read_at": args.read_at,
                "seed": args.seed,
                "readings": rows,
                "seconds": round(time.perf_counter() - start, 1),
                **torch_build(),
            }
        )
    )


if __name__ == "__main__":
    main()
