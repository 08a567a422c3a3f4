"""Training compute, counted: what an episode spent, so growth is compared with starting bigger
on cost as well as on size.

Counts are torch's own (`torch.utils.flop_counter.FlopCounterMode`): the analytic FLOPs of the
matrix products and convolutions of a pass (forward and backward), from their shapes; element-wise
work (normalisation, activations, the optimizer) is not counted. Each epoch's network is counted
once, on one sample, and multiplied by the samples it trained on: every count is linear in the
batch. The counting pass runs on a copy of the model, so the model's BatchNorm statistics,
gradients and CPU RNG are untouched (a host that draws in its forward, with dropout, draws from
a forked generator), and it is the architecture as trained that epoch (a seed in
TRAINING computes and is counted; its output does not reach the host's). Training (forward and
backward of host and seeds) and measurement (the calibration and selection passes with every
counterfactual arm) are counted apart.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
from torch.utils.flop_counter import FlopCounterMode

from esper.kasmina import MorphogeneticModel
from esper.kasmina.lifecycle import GateRefused
from esper.leyline import BlendSchedule, BudgetProjections, Decision, LifecycleOp, SeedStage, TrainingSignals
from esper.tolaria.datasets import Batch, TaskData
from esper.tolaria.passes import VALIDATION_BATCH_SIZE
from esper.tolaria.tasks import TaskSpec
from esper.tolaria.training import loss_and_correct

GIGA = 1e9


def training_flops_per_sample(model: MorphogeneticModel, sample: Batch) -> int:
    """FLOPs of one training forward and backward of `model` on one sample."""
    twin = copy.deepcopy(model).train()
    x, y = sample
    with FlopCounterMode(display=False) as counter:
        loss, _ = loss_and_correct(twin(x), y)
        loss.backward()
    return counter.get_total_flops()


@torch.no_grad()
def measurement_flops_per_sample(model: MorphogeneticModel, sample: Batch, ablate: Sequence[str]) -> int:
    """FLOPs of one measurement forward of `model` on one sample: the model and every ablated arm
    (each rerun from where its seed joins), as calibration and validation run them."""
    twin = copy.deepcopy(model).eval()
    with FlopCounterMode(display=False) as counter:
        twin.forward_with_ablations(sample[0], tuple(ablate))
    return counter.get_total_flops()


def static_train_gflops(task: TaskSpec, width: int, data: TaskData, epochs: int) -> float:
    """Training GFLOPs of a whole static run of `task`'s host at `width` on `data`: the host's
    per-sample count times the samples of `epochs` epochs."""
    with torch.random.fork_rng(devices=[]):  # the weights do not matter, and the caller's RNG is left be
        model = MorphogeneticModel(task.build_host(width))
    sample = next(iter(data.calibration_batches(1)))
    return training_flops_per_sample(model, sample) * data.epoch_sample_count(task.batch_size) * epochs / GIGA


def width_for_train_gflops(task: TaskSpec, data: TaskData, epochs: int, target_gflops: float) -> int:
    """The static host width whose whole run's training GFLOPs are nearest `target_gflops` (as a
    ratio). A run's cost rises with width, so the widths are bisected, from the task's own up."""
    if not target_gflops > 0:
        raise ValueError(f"target training GFLOPs must be > 0, got {target_gflops}")
    costs: dict[int, float] = {}

    def cost(width: int) -> float:
        if width not in costs:
            costs[width] = static_train_gflops(task, width, data, epochs)
        return costs[width]

    high = max(task.host_width, 1)
    while cost(high) < target_gflops:
        high *= 2
    low = 1  # the narrowest width costing at least the target lies in [low, high]
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if cost(middle) < target_gflops else (low, middle)
    candidates = [w for w in (high - 1, high) if w >= 1]
    return min(candidates, key=lambda w: abs(math.log(cost(w) / target_gflops)))


def architecture_key(model: MorphogeneticModel) -> tuple:
    """What a pass's FLOPs depend on: every parameter's shape, and how each slot's seed takes
    part (absent, training in isolation, blended at alpha > 0, or at alpha 0 and skipped)."""
    roles = tuple(
        (s.slot_id.name, s.blueprint, "training" if s.stage is SeedStage.TRAINING else s.alpha > 0.0)
        for s in model.ordered_slots()
        if s.seed is not None
    )
    return tuple(tuple(p.shape) for p in model.parameters()), roles


def projection_key(model: MorphogeneticModel) -> tuple:
    """What a projection's network depends on: every parameter's shape, and which blueprint each
    slot's seed is (how it takes part does not matter: the projection blends every seed in)."""
    seeds = tuple((s.slot_id.name, s.blueprint) for s in model.ordered_slots() if s.seed is not None)
    return tuple(tuple(p.shape) for p in model.parameters()), seeds


def projection_twins(
    model: MorphogeneticModel, slot: str | None, blueprint: str | None
) -> tuple[MorphogeneticModel, ...]:
    """Copies of `model` with a seed of `blueprint` germinated in `slot` (none where `slot` is
    None: the run as it stands): one with every live seed
    blended in at alpha 1, one with every width seed also merged into the host, in host order.
    Whatever the seeds do next, a training epoch costs no more than the dearer of the two. A seed
    training in isolation or part-blended computes no more than at alpha 1, and a merge can cost
    more than blending: a width seed grown beside a live one in the block before it reads only
    the host's channels, but merged, it reads the other's too, as zero weights
    (`tests/test_compute_budget.py` checks both). The new seed draws from a forked RNG."""
    blended = copy.deepcopy(model)
    if slot is not None:
        with torch.random.fork_rng(devices=[]):
            blended.slot(slot).germinate(blueprint, "projected", BlendSchedule.LINEAR)
    for s in blended.ordered_slots():
        if s.seed is not None and s.lifecycle.is_live:
            s.lifecycle.stage = SeedStage.PROBATIONARY
    merged = copy.deepcopy(blended)
    for s in merged.ordered_slots():
        if s.holds_width_seed:
            s.lifecycle.stage = SeedStage.FOSSILIZED
            merged.merge_width_seed(s.slot_id.name)
    return blended, merged


class ComputeMeter:
    """One env's FLOPs over an episode, training and measurement apart. A network's per-sample
    counts are kept by `architecture_key`: an episode's network changes a few times, so most
    epochs are counted without a counting pass."""

    def __init__(self, data: TaskData, device: torch.device) -> None:
        x, y = next(iter(data.calibration_batches(1)))  # shapes only: FLOPs depend on nothing else
        self.sample: Batch = (x.to(device), y.to(device))
        self.calibration_samples = sum(x.shape[0] for x, _ in data.calibration_batches(VALIDATION_BATCH_SIZE))
        """Samples a measurement's BatchNorm calibration reads (a host without BatchNorm needs none)."""
        self.selection_samples = sum(x.shape[0] for x, _ in data.val_batches(VALIDATION_BATCH_SIZE))
        self.reset()

        self._per_sample: dict[tuple, int] = {}

    def reset(self) -> None:
        self.train_flops, self.measure_flops = 0, 0
        self.start_host_flops = 0
        """What the episode's start host alone would have spent on the same epochs' samples."""
        self._start_per_sample: int | None = None
        self._samples_per_epoch = 0
        self._start_run_flops = 0
        """The start host's whole run: its per-sample count times every epoch's samples."""

    def start_episode(self, model: MorphogeneticModel, max_epochs: int, samples_per_epoch: int) -> None:
        """The episode's start host (no seed yet), length and samples per epoch, against which
        `extra_train_share` counts what growth spent and a compute budget is set; counts restart."""
        self.reset()
        self._start_per_sample = self._training_per_sample(model)
        self._samples_per_epoch = samples_per_epoch
        self._start_run_flops = self._start_per_sample * samples_per_epoch * max_epochs

    def tally(self) -> tuple[int, int, int]:
        """The counts so far, for `rewind`."""
        return self.train_flops, self.measure_flops, self.start_host_flops

    def rewind(self, tally: tuple[int, int, int]) -> None:
        """Back to a `tally`: a step undone after an exception is not part of the run, as its
        epoch and events are not, so retrying it counts its compute once."""
        self.train_flops, self.measure_flops, self.start_host_flops = tally

    def add_training_epoch(self, model: MorphogeneticModel, samples: int) -> None:
        """An epoch trained on `samples` samples (counted even when the governor undoes it: the
        compute was spent)."""
        self.train_flops += self._training_per_sample(model) * samples
        if self._start_per_sample is not None:
            self.start_host_flops += self._start_per_sample * samples

    @property
    def train_share(self) -> float:
        """Training FLOPs spent so far, over the start host's whole run: what a compute budget
        (`GateThresholds.compute_budget`) caps."""
        return self.train_flops / self._start_run_flops if self._start_run_flops else 0.0

    def projected_train_share(
        self, model: MorphogeneticModel, slot: str | None, blueprint: str | None, epochs_left: int
    ) -> float:
        """`train_share` at the episode's end if a seed of `blueprint` germinated in `slot` now
        (none where `slot` is None): what is spent, plus `epochs_left` epochs of the dearer of
        `projection_twins`. An upper bound, whatever the seeds do next (a cull only lowers it), so
        a run whose every germination passed it ends within it. 0 when an epoch trains on nothing."""
        if not self._start_run_flops:
            return 0.0
        key = ("projected", projection_key(model), slot, blueprint)
        if key not in self._per_sample:
            with torch.random.fork_rng(devices=[]):  # the twin's seed and a host's dropout draw here
                twins = projection_twins(model, slot, blueprint)
                self._per_sample[key] = max(training_flops_per_sample(twin, self.sample) for twin in twins)
        ahead = self._per_sample[key] * self._samples_per_epoch * epochs_left
        return (self.train_flops + ahead) / self._start_run_flops

    @property
    def extra_train_share(self) -> float:
        """Training FLOPs spent beyond the start host's own on the same epochs, over the start
        host's whole run (`max_epochs` epochs): 0 for a static host, 0.1 for growth that has
        cost a tenth of a static run more so far. What a reward's compute price charges."""
        if not self._start_run_flops:
            return 0.0
        return (self.train_flops - self.start_host_flops) / self._start_run_flops

    def _training_per_sample(self, model: MorphogeneticModel) -> int:
        key = ("train", architecture_key(model))
        if key not in self._per_sample:
            with torch.random.fork_rng(devices=[]):  # a host that draws (dropout) leaves the CPU RNG be
                self._per_sample[key] = training_flops_per_sample(model, self.sample)
        return self._per_sample[key]

    def add_measurement(self, model: MorphogeneticModel, ablate: Sequence[str]) -> None:
        """One selection measurement with the counterfactual arms of `ablate`, calibration included."""
        key = ("measure", architecture_key(model), tuple(ablate))
        if key not in self._per_sample:
            self._per_sample[key] = measurement_flops_per_sample(model, self.sample, ablate)
        calibrated = self.calibration_samples if model.batchnorm_layers() else 0
        self.measure_flops += self._per_sample[key] * (calibrated + self.selection_samples)

    @property
    def train_gflops(self) -> float:
        return self.train_flops / GIGA

    @property
    def measure_gflops(self) -> float:
        return self.measure_flops / GIGA


class ComputeBudget:
    """G0's compute budget (`GateThresholds.compute_budget`) over one env's episodes: which
    germinations keep a run within it, by the meter's projection."""

    def __init__(self, meter: ComputeMeter, budget: float | None) -> None:
        self.meter, self.budget = meter, budget

    def projections(
        self, model: MorphogeneticModel, slots: Sequence[str], epochs_left: int, may_germinate: bool
    ) -> BudgetProjections | None:
        """Where the run ends against the budget: as it stands, and per slot of `slots` with each
        blueprint it accepts germinated now (no entry where the slot is not empty, or no
        germination is possible); None without a budget."""
        if self.budget is None:
            return None
        shares: dict[str, dict[str, float]] = {}
        for name in slots:
            slot = model.slot(name)
            if not may_germinate or epochs_left < 1 or slot.stage is not SeedStage.DORMANT:
                shares[name] = {}
                continue
            shares[name] = {
                bp: self.meter.projected_train_share(model, name, bp, epochs_left) for bp in slot.accepted_blueprints()
            }
        standing = self.meter.projected_train_share(model, None, None, max(epochs_left, 0))
        return BudgetProjections(self.budget, standing, shares)

    def used(self) -> float:
        """Training FLOPs spent so far over the budget's; 0 without a budget."""
        return self.meter.train_share / self.budget if self.budget is not None else 0.0

    def check(self, model: MorphogeneticModel, decision: Decision, signals: TrainingSignals, epochs_left: int) -> None:
        """Refuse a germination into an empty slot that the signals' `affordable_blueprints`
        exclude (one into a slot that is not empty the lifecycle's own G0 refuses)."""
        if decision.op is not LifecycleOp.GERMINATE or model.slot(decision.slot).stage is not SeedStage.DORMANT:
            return
        if signals.slot(decision.slot).affords(decision.blueprint):
            return
        share = self.meter.projected_train_share(model, decision.slot, decision.blueprint, epochs_left)
        raise GateRefused(
            f"G0: {decision.blueprint} in {decision.slot} would take the run to {share:.3f} start-host runs "
            f"of training FLOPs, over its compute budget of {self.budget}"
        )
