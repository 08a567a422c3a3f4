"""Cost of the morphogenetic machinery, as ratios measured in one run.

dormant_slot_overhead: a training epoch of the model with three dormant slots / the same host
    with no slots at all (same weights, same batches, same optimizer). Goal <= 1.03.
counterfactual_cost_ratio: with three blended seeds, the fused validation + counterfactual pass
    / a plain validation pass.
naive_counterfactual_ratio: the same measurements done naively (plain validation plus one full
    pass per ablated seed) / a plain validation pass. Goal: fused <= 0.7 x naive.

Usage: python benchmarks/overhead.py [--task shapes] [--repeats 21]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

from esper.kasmina import GateInputs, MorphogeneticModel
from esper.leyline import BlendSchedule, SeedStage
from esper.tolaria import get_task
from esper.tolaria.training import loss_and_correct, validate


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def train_pass(module: torch.nn.Module, batches, opt: torch.optim.Optimizer) -> None:
    module.train()
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss, _ = loss_and_correct(module(x), y)
        loss.backward()
        opt.step()


@torch.no_grad()
def naive_counterfactual(model: MorphogeneticModel, batches, slots) -> None:
    """Plain validation plus one full forward pass per ablated slot."""
    model.eval()
    for x, y in batches:
        loss_and_correct(model(x), y)
        for name in slots:
            loss_and_correct(model(x, {name: 0.0}), y)


def median_ratio(numerator, denominator, repeats: int) -> float:
    """Median over repeats of numerator-time / denominator-time. The two are timed back to back,
    in alternating order, so slow drifts of a shared machine cancel instead of biasing one side."""
    numerator(), denominator()  # warm-up
    ratios = []
    for i in range(repeats):
        if i % 2:
            d, n = timed(denominator), timed(numerator)
        else:
            n, d = timed(numerator), timed(denominator)
        ratios.append(n / d)
    return statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="shapes")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--blueprint", default="conv_light")
    args = parser.parse_args()
    task = get_task(args.task)
    data = task.load_data(task.resolve_data_dir(None))
    gen = torch.Generator().manual_seed(0)
    train_batches = list(data.train_batches(task.batch_size, gen))[:30]
    val_batches = list(data.val_batches(500))

    torch.manual_seed(0)
    model = MorphogeneticModel(task.build_host())
    bare_host = copy.deepcopy(model.host)
    model_opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    host_opt = torch.optim.AdamW(bare_host.parameters(), lr=1e-4)
    dormant = median_ratio(
        lambda: train_pass(model, train_batches, model_opt),
        lambda: train_pass(bare_host, train_batches, host_opt),
        args.repeats,
    )

    for slot in model.ordered_slots():
        slot.germinate(args.blueprint, f"seed-{slot.slot_id.name}", BlendSchedule.LINEAR)
        while slot.stage is not SeedStage.PROBATIONARY:
            slot.tick(GateInputs(contribution=1.0, grad_norm=1.0))
    names = model.blended_slots()

    def plain():
        return validate(model, val_batches, ())

    fused = median_ratio(lambda: validate(model, val_batches, names), plain, args.repeats)
    naive = median_ratio(lambda: naive_counterfactual(model, val_batches, names), plain, args.repeats)
    print(
        json.dumps(
            {
                "task": task.name,
                "blueprint": args.blueprint,
                "blended_seeds": len(names),
                "dormant_slot_overhead": round(dormant, 4),
                "counterfactual_cost_ratio": round(fused, 3),
                "naive_counterfactual_ratio": round(naive, 3),
                "fused_over_naive": round(fused / naive, 3),
                "repeats": args.repeats,
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
