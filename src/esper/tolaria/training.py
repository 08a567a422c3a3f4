"""One training epoch and one fused validation pass: the single implementation of each.

Both keep every running sum on the device and synchronise with the host once, at the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from esper.kasmina import MorphogeneticModel
from esper.kasmina.model import BatchNormStats
from esper.leyline.constants import LOSS_READING_POINTS_PER_NAT

Batch = tuple[torch.Tensor, torch.Tensor]


PRECISIONS: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}
Precision = str
"""An `--amp` choice: a key of PRECISIONS."""


def autocast(amp: Precision | None, device: torch.device, cache: bool = True) -> contextlib.AbstractContextManager:
    """Autocast to `amp`'s dtype on `device`, or nothing. Each training or validation pass enters
    its own context, and leaving it drops autocast's weight-cast cache, so a no-grad validation
    pass never leaves casts that a later training forward would reuse. `cache=False` for a pass
    captured in a CUDA graph, which must not keep casts between replays (the casts are the same)."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=PRECISIONS[amp], cache_enabled=cache)


def loss_and_correct(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy and the count of correct predictions, for classification or LM logits."""
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_targets = targets.reshape(-1)
    loss = F.cross_entropy(flat_logits.float(), flat_targets)
    correct = (flat_logits.argmax(dim=-1) == flat_targets).sum()
    return loss, correct


@dataclass(frozen=True)
class TrainStats:
    loss: float
    accuracy: float  # percentage points
    seed_grad_norm: dict[str, float]
    """Mean gradient norm of each seed over the epoch, by slot."""
    seed_finite: dict[str, bool]
    """Whether each seed's parameters are all finite after the epoch, by slot."""
    host_finite: bool
    """Whether the host's own parameters are all finite after the epoch."""


@dataclass(frozen=True)
class ValidationStats:
    loss: float
    accuracy: float  # percentage points
    ablated_accuracy: dict[str, float]
    """Accuracy with each blended slot's alpha forced to 0, by slot."""
    ablated_loss: dict[str, float] = field(default_factory=dict)
    """Mean loss with each blended slot's alpha forced to 0, by slot."""
    keep_reading: str = "accuracy"
    """What `contribution` reads (`GateThresholds.keep_reading`): accuracy, or loss in points."""

    @classmethod
    def from_sums(cls, values: list[float], n_items: int, ablate: tuple[str, ...]) -> ValidationStats:
        """The statistics from `validation_sums`'s sums, read back to the host."""
        k = len(ablate)
        return cls(
            loss=values[0] / n_items,
            accuracy=100.0 * values[1] / n_items,
            ablated_accuracy={name: 100.0 * v / n_items for name, v in zip(ablate, values[2 : 2 + k], strict=True)},
            ablated_loss={name: v / n_items for name, v in zip(ablate, values[2 + k :], strict=True)},
        )

    def contribution(self, slot: str) -> float | None:
        """The seed's contribution in points, as the gates and controllers read it: the accuracy
        reading, or with `keep_reading` "loss" the loss reading at `LOSS_READING_POINTS_PER_NAT`."""
        if self.keep_reading == "loss":
            loss = self.loss_contribution(slot)
            return None if loss is None else LOSS_READING_POINTS_PER_NAT * loss
        return self.accuracy_contribution(slot)

    def accuracy_contribution(self, slot: str) -> float | None:
        """Accuracy with the seed minus without it, in points."""
        ablated = self.ablated_accuracy.get(slot)
        return None if ablated is None else self.accuracy - ablated

    def loss_contribution(self, slot: str) -> float | None:
        """Loss without the seed minus with it (positive: the seed helps). A continuous reading:
        every image moves it, where accuracy moves only with the images whose answer flips."""
        ablated = self.ablated_loss.get(slot)
        return None if ablated is None else ablated - self.loss


def seed_gradient_norm(seed: nn.Module) -> torch.Tensor:
    """The total L2 norm of a seed's gradients, as a device tensor (no sync)."""
    grads = [p.grad for p in seed.parameters() if p.grad is not None]
    if not grads:
        return torch.zeros((), device=next(seed.parameters()).device)
    return torch.nn.utils.get_total_norm(grads)


@dataclass(frozen=True)
class EpochSums:
    """An epoch's running sums on the device: the loss summed over steps, the correct
    predictions, and each seed's gradient norm summed over steps. A CUDA graph of the training
    step writes into one set across epochs (`esper.tolaria.graphs`), so they are zeroed in place."""

    loss: torch.Tensor
    correct: torch.Tensor
    seed_grad_norms: torch.Tensor

    @classmethod
    def zeros(cls, n_seeds: int, device: torch.device) -> EpochSums:
        return cls(
            torch.zeros((), device=device),
            torch.zeros((), device=device, dtype=torch.int64),
            torch.zeros(n_seeds, device=device),
        )

    def zero_(self) -> EpochSums:
        for tensor in (self.loss, self.correct, self.seed_grad_norms):
            tensor.zero_()
        return self


class TrainingEpoch:
    """One training epoch fed a batch at a time, with every running sum kept on the device.

    The vectorized trainer feeds every env the same batch before drawing the next (one shared
    data iteration per step); a single env feeds itself its own batches. Both run this
    one training step. The host optimizer and one optimizer per seed step together after each
    backward pass; gradient norms of every seed are collected here, the one place gradients
    are inspected.
    """

    def __init__(
        self,
        model: MorphogeneticModel,
        optimizers: list[torch.optim.Optimizer],
        amp: Precision | None = None,
        scaler: torch.amp.GradScaler | None = None,
        forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
        sums: EpochSums | None = None,
        autocast_cache: bool = True,
    ) -> None:
        """`amp` runs forward and loss under autocast; `scaler` (fp16: the env's own) scales the
        loss, is unscaled before gradients are inspected, and skips steps with inf/NaN grads.
        `forward` replaces `model(x)` (a `torch.compile`d model); everything around it, autocast
        and the optimizer steps included, stays outside the compiled region. `sums`: the
        running sums to zero and add into (those a CUDA graph of the step writes), else new ones."""
        self.model, self.optimizers = model, optimizers
        self.forward = forward if forward is not None else model
        self.amp, self.scaler, self.autocast_cache = amp, scaler, autocast_cache
        self.seeded = [s for s in model.ordered_slots() if s.seed is not None]
        device = next(model.parameters()).device
        self.sums = sums.zero_() if sums is not None else EpochSums.zeros(len(self.seeded), device)
        self.n_steps, self.n_items, self.n_samples = 0, 0, 0
        """Steps, targets (tokens of an LM) and samples (images, windows) trained on."""

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One optimisation step on (x, y)."""
        self.device_step(x, y)
        self.count(x, y)

    def count(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Count a step whose device work ran (eagerly, or as a graph replay)."""
        self.n_steps += 1
        self.n_items += y.numel()
        self.n_samples += x.shape[0]

    def device_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """The step's device work, with no host-device sync: what a CUDA graph captures."""
        self.model.train()
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        with autocast(self.amp, x.device, self.autocast_cache):
            loss, batch_correct = loss_and_correct(self.forward(x), y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            for opt in self.optimizers:
                self.scaler.unscale_(opt)  # the seeds' gradient norms are read unscaled
        else:
            loss.backward()
        if self.seeded:
            norms = torch.stack([seed_gradient_norm(s.seed) for s in self.seeded])  # type: ignore[arg-type]
            if self.scaler is not None:
                # An overflowing fp16 step is skipped by the scaler, not a diverging seed: it
                # adds nothing to the norms (the epoch mean then slightly underestimates them).
                norms = torch.where(torch.isfinite(norms), norms, torch.zeros_like(norms))
            self.sums.seed_grad_norms.add_(norms)
        for opt in self.optimizers:
            if self.scaler is not None:
                self.scaler.step(opt)
            else:
                opt.step()
        if self.scaler is not None:
            self.scaler.update()
        self.sums.loss.add_(loss.detach())
        self.sums.correct.add_(batch_correct)

    def finish(self) -> TrainStats:
        """The epoch's statistics, read back with the one host-device sync of the epoch."""
        if self.n_steps == 0:
            raise ValueError("the training data yielded no batch: the dataset is smaller than one batch")
        finite = [s.finite_flag() for s in self.seeded]
        host_finite = torch.stack([torch.isfinite(p).all() for p in self.model.host_parameters()]).all()
        sums = self.sums
        head = torch.stack([sums.loss, sums.correct.float(), host_finite.float()])
        flags = torch.stack(finite).float() if finite else sums.seed_grad_norms.new_zeros(0)
        packed = torch.cat([head, sums.seed_grad_norms, flags]).tolist()
        names = [s.slot_id.name for s in self.seeded]
        k = len(names)
        return TrainStats(
            loss=packed[0] / self.n_steps,
            accuracy=100.0 * packed[1] / self.n_items,
            seed_grad_norm={n: g / self.n_steps for n, g in zip(names, packed[3 : 3 + k], strict=True)},
            seed_finite={n: f > 0.5 for n, f in zip(names, packed[3 + k :], strict=True)},
            host_finite=packed[2] > 0.5,
        )


class BatchNormMoments:
    """Per-channel moments of the inputs of some BatchNorm layers, pooled over calibration batches.

    Each batch runs the layers in training mode (normalising by the batch's own statistics, as
    `torch.optim.swa_utils.update_bn` does) on fresh zero buffers passed as a forward argument;
    a layer's update of a zero buffer is `momentum x` the batch statistic, which is read back.
    Everything stays on the device: no host-device sync.
    """

    def __init__(self, layers: dict[str, _BatchNorm]) -> None:
        self.layers = layers
        self.weight = 0.0
        self.sums: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def fresh_buffers(self) -> dict[str, torch.Tensor]:
        buffers: dict[str, torch.Tensor] = {}
        for name, bn in self.layers.items():
            assert bn.running_mean is not None and bn.running_var is not None
            buffers[f"{name}.running_mean"] = torch.zeros_like(bn.running_mean)
            buffers[f"{name}.running_var"] = torch.zeros_like(bn.running_var)
            buffers[f"{name}.num_batches_tracked"] = torch.zeros((), dtype=torch.long, device=bn.running_mean.device)
        return buffers

    def absorb(self, buffers: dict[str, torch.Tensor], batch_size: int) -> None:
        """Add one batch, weighted by its size: E[x] and E[x^2] of each channel."""
        for name, bn in self.layers.items():
            # momentum None is a cumulative average: after one batch from zero, the factor is 1.
            factor = bn.momentum if bn.momentum is not None else 1.0
            mean = buffers[f"{name}.running_mean"] / factor
            var = buffers[f"{name}.running_var"] / factor
            first, second = self.sums.get(name, (0.0, 0.0))
            self.sums[name] = (first + batch_size * mean, second + batch_size * (var + mean.square()))
        self.weight += batch_size

    def statistics(self) -> dict[str, torch.Tensor]:
        """Running mean and variance of every layer over all batches (the pooled variance: the
        mean within-batch variance plus the variance of the batch means)."""
        if self.weight == 0:
            raise ValueError("the calibration data yielded no batch")
        stats: dict[str, torch.Tensor] = {}
        for name, (first, second) in self.sums.items():
            mean = first / self.weight
            stats[f"{name}.running_mean"] = mean
            stats[f"{name}.running_var"] = (second / self.weight - mean.square()).clamp_min(0.0)
        return stats


@dataclass(frozen=True)
class ArmStatistics:
    """BatchNorm statistics for one measurement: the model's own, and each ablated arm's for
    the layers downstream of its slot. Both are forward arguments; no module holds them."""

    model: BatchNormStats
    ablated: dict[str, BatchNormStats]


@torch.no_grad()
def recalibrate_batchnorm(
    model: MorphogeneticModel,
    batches: Iterable[Batch],
    ablate: tuple[str, ...],
    amp: Precision | None = None,
    autocast_cache: bool = True,
) -> ArmStatistics:
    """Recompute the BatchNorm statistics of the model and of each ablated arm on `batches`.

    Why: in eval mode a BatchNorm layer downstream of a blended seed normalises with statistics
    collected with the seed in place. Forcing alpha to 0 under those statistics feeds the layer a
    distribution it was not calibrated for, and the accuracy drop measures that mismatch, not
    the seed (a `norm` seed that does nothing read +8.5 points that way). So each arm gets the
    statistics of its own network, from the same training images: the model's (precise
    statistics in place of the running average of the epoch, so that the accuracy reported comes
    from the same procedure as every arm) and each ablated arm's, covering only the layers
    downstream of its slot. They are returned, to be passed as forward arguments: the module's
    buffers are never written, and its train/eval mode is put back as it was. The prefix before
    an ablated slot is computed once and shared, as in `validate`.
    """
    model_moments = BatchNormMoments(model.batchnorm_layers())
    if not model_moments.layers:
        return ArmStatistics({}, {})
    arm_moments = {name: BatchNormMoments(model.batchnorm_layers(after_slot=name)) for name in ablate}
    was_training = model.training
    model.train()  # BatchNorm normalises by batch statistics; TRAINING-stage seeds stay out (no grad)
    try:
        for x, _ in _nonempty(batches, "calibration"):
            buffers = model_moments.fresh_buffers()
            arm_buffers = {name: moments.fresh_buffers() for name, moments in arm_moments.items()}
            with autocast(amp, x.device, autocast_cache):
                model.forward_with_ablations(x, ablate, buffers, arm_buffers)
            model_moments.absorb(buffers, x.shape[0])
            for name, moments in arm_moments.items():
                moments.absorb(arm_buffers[name], x.shape[0])
    finally:
        model.train(was_training)
    return ArmStatistics(
        model_moments.statistics(), {name: moments.statistics() for name, moments in arm_moments.items()}
    )


@torch.no_grad()
def validate(
    model: MorphogeneticModel,
    batches: Iterable[Batch],
    ablate: tuple[str, ...],
    amp: Precision | None = None,
    calibration: Iterable[Batch] | None = None,
) -> ValidationStats:
    """Loss and accuracy, plus the accuracy with each slot in `ablate` at alpha 0, in one pass.

    A model with BatchNorm layers first has its statistics, and each ablated arm's, recomputed on
    the `calibration` batches (`recalibrate_batchnorm`); a model without needs none. Each batch
    then runs the model once, and each ablation reruns only the part of the network after its
    slot (see `MorphogeneticModel.forward_with_ablations`), each with its own statistics.
    """
    sums, n_items = validation_sums(model, batches, ablate, amp, calibration)
    return ValidationStats.from_sums(sums.tolist(), n_items, ablate)  # the one sync of the pass


@torch.no_grad()
def validation_sums(
    model: MorphogeneticModel,
    batches: Iterable[Batch],
    ablate: tuple[str, ...],
    amp: Precision | None = None,
    calibration: Iterable[Batch] | None = None,
    autocast_cache: bool = True,
) -> tuple[torch.Tensor, int]:
    """`validate`'s device work, with no host-device sync (what a CUDA graph of the measurement
    captures): the sums `ValidationStats.from_sums` reads, and the count of targets."""
    if calibration is None:
        if model.batchnorm_layers():
            raise ValueError("the model has BatchNorm layers: validate needs calibration batches (training split)")
        stats = ArmStatistics({}, {})
    else:
        stats = recalibrate_batchnorm(model, calibration, ablate, amp, autocast_cache)
    model.eval()
    device = next(model.parameters()).device
    k = len(ablate)
    sums = torch.zeros(2 + 2 * k, device=device)  # loss * n, correct, then correct and loss * n per ablation
    n_items = 0
    for x, y in _nonempty(batches, "validation"):
        with autocast(amp, x.device, autocast_cache):
            logits, ablated = model.forward_with_ablations(x, ablate, stats.model, stats.ablated)
        loss, correct = loss_and_correct(logits, y)
        arms = [loss_and_correct(ablated[name], y) for name in ablate]
        ablated_correct = [c.float() for _, c in arms]
        ablated_loss = [arm_loss * y.numel() for arm_loss, _ in arms]
        sums += torch.stack([loss * y.numel(), correct.float(), *ablated_correct, *ablated_loss]).float()
        n_items += y.numel()
    return sums, n_items


def _nonempty(batches: Iterable[Batch], what: str) -> Iterator[Batch]:
    seen = False
    for batch in batches:
        seen = True
        yield batch
    if not seen:
        raise ValueError(f"the {what} data yielded no batch")
