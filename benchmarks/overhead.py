"""Cost of the morphogenetic machinery, as ratios measured in one run.

dormant_slot_overhead: a training epoch of the model with three dormant slots / the same host
    with no slots at all (same weights, same batches, same optimizer). Goal <= 1.03.
fused_over_naive: the measurement pass with three blended seeds (BatchNorm statistics of the
    model and of each ablated arm recomputed on the calibration images, then validation with
    every counterfactual, prefixes shared) / the same measurements done naively: for the model
    and for each ablated arm, one full calibration pass and one full validation pass. Both do
    the same normalization work. Goal <= 0.7.
measurement_over_epoch: that fused measurement pass / one training epoch of the same model (the
    task's samples per epoch, with the host's and the seeds' optimizer steps). Goal <= 0.25.
static_measurement_over_epoch: the same for the host with no seed (calibration and validation only).

Usage: python benchmarks/overhead.py [--task shapes] [--repeats 21] [--blueprint conv_light]
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
from esper.runs.common import torch_build
from esper.tolaria import get_task
from esper.tolaria.passes import VALIDATION_BATCH_SIZE
from esper.tolaria.training import BatchNormMoments, TrainingEpoch, loss_and_correct, validate


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


def training_epoch(model: MorphogeneticModel, batches, optimizers) -> None:
    epoch = TrainingEpoch(model, optimizers)
    for x, y in batches:
        epoch.step(x, y)
    epoch.finish()


@torch.no_grad()
def naive_measurement(model: MorphogeneticModel, calibration, val_batches, slots) -> None:
    """For the model and for each ablated arm, alone: recompute the statistics of every
    BatchNorm layer that arm runs with one full pass over the calibration images, then one full
    validation pass with them."""
    for arm in (None, *slots):
        overrides = {} if arm is None else {arm: 0.0}
        layers = {k: m for k, m in model.batchnorm_layers().items() if arm is None or not k.startswith(f"slots.{arm}.")}
        moments = BatchNormMoments(layers)
        model.train()
        for x, _ in calibration:
            buffers = moments.fresh_buffers()
            model(x, overrides, buffers)
            moments.absorb(buffers, x.shape[0])
        model.eval()
        stats = moments.statistics()
        for x, y in val_batches:
            loss_and_correct(model(x, overrides, stats), y)


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
    epoch_batches = list(data.train_batches(task.batch_size, gen))
    val_batches = list(data.val_batches(VALIDATION_BATCH_SIZE))
    calibration = list(data.calibration_batches(VALIDATION_BATCH_SIZE))

    torch.manual_seed(0)
    model = MorphogeneticModel(task.build_host())
    bare_host = copy.deepcopy(model.host)
    model_opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    host_opt = torch.optim.AdamW(bare_host.parameters(), lr=1e-4)
    dormant = median_ratio(
        lambda: train_pass(model, epoch_batches[:30], model_opt),
        lambda: train_pass(bare_host, epoch_batches[:30], host_opt),
        args.repeats,
    )
    static_fraction = median_ratio(
        lambda: validate(model, val_batches, (), calibration=calibration),
        lambda: training_epoch(model, epoch_batches, [model_opt]),
        max(3, args.repeats // 4),
    )

    for slot in model.ordered_slots():
        slot.germinate(args.blueprint, f"seed-{slot.slot_id.name}", BlendSchedule.LINEAR)
        while slot.stage is not SeedStage.PROBATIONARY:
            slot.tick(GateInputs(contribution=1.0, grad_norm=1.0))
    names = model.blended_slots()
    optimizers = [torch.optim.AdamW(model.host_parameters(), lr=1e-4)]
    optimizers += [torch.optim.AdamW(s.seed.parameters(), lr=1e-4) for s in model.ordered_slots()]

    def fused():
        return validate(model, val_batches, names, calibration=calibration)

    fused_over_naive = median_ratio(
        fused, lambda: naive_measurement(model, calibration, val_batches, names), args.repeats
    )
    fraction = median_ratio(fused, lambda: training_epoch(model, epoch_batches, optimizers), max(3, args.repeats // 4))
    print(
        json.dumps(
            {
                "task": task.name,
                "blueprint": args.blueprint,
                "blended_seeds": len(names),
                "dormant_slot_overhead": round(dormant, 4),
                "fused_over_naive": round(fused_over_naive, 3),
                "measurement_over_epoch": round(fraction, 3),
                "static_measurement_over_epoch": round(static_fraction, 3),
                "calibration_images": sum(x.shape[0] for x, _ in calibration),
                "val_images": sum(x.shape[0] for x, _ in val_batches),
                "epoch_images": sum(x.shape[0] for x, _ in epoch_batches),
                "repeats": args.repeats,
                "threads": torch.get_num_threads(),
                **torch_build(),
            }
        )
    )


if __name__ == "__main__":
    main()
