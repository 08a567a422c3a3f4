"""One training epoch and one fused validation pass: the single implementation of each.

Both keep every running sum on the device and synchronise with the host once, at the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from esper.kasmina import MorphogeneticModel

Batch = tuple[torch.Tensor, torch.Tensor]


PRECISIONS: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}
Precision = str
"""An `--amp` choice: a key of PRECISIONS."""


def autocast(amp: Precision | None, device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast to `amp`'s dtype on `device`, or nothing. Each training or validation pass enters
    its own context, and leaving it drops autocast's weight-cast cache, so a no-grad validation
    pass never leaves casts that a later training forward would reuse."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=PRECISIONS[amp])


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

    def contribution(self, slot: str) -> float | None:
        ablated = self.ablated_accuracy.get(slot)
        return None if ablated is None else self.accuracy - ablated


def seed_gradient_norm(seed: nn.Module) -> torch.Tensor:
    """The total L2 norm of a seed's gradients, as a device tensor (no sync)."""
    grads = [p.grad for p in seed.parameters() if p.grad is not None]
    if not grads:
        return torch.zeros((), device=next(seed.parameters()).device)
    return torch.nn.utils.get_total_norm(grads)


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
    ) -> None:
        """`amp` runs forward and loss under autocast; `scaler` (fp16: the env's own) scales the
        loss, is unscaled before gradients are inspected, and skips steps with inf/NaN grads.
        `forward` replaces `model(x)` (a `torch.compile`d model); everything around it, autocast
        and the optimizer steps included, stays outside the compiled region."""
        self.model, self.optimizers = model, optimizers
        self.forward = forward if forward is not None else model
        self.amp, self.scaler = amp, scaler
        self.seeded = [s for s in model.ordered_slots() if s.seed is not None]
        device = next(model.parameters()).device
        self.loss_sum = torch.zeros((), device=device)
        self.correct = torch.zeros((), device=device, dtype=torch.int64)
        self.grad_sums = torch.zeros(len(self.seeded), device=device)
        self.n_steps, self.n_items = 0, 0

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.model.train()
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        with autocast(self.amp, x.device):
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
            self.grad_sums += norms
        for opt in self.optimizers:
            if self.scaler is not None:
                self.scaler.step(opt)
            else:
                opt.step()
        if self.scaler is not None:
            self.scaler.update()
        self.loss_sum += loss.detach()
        self.correct += batch_correct
        self.n_steps += 1
        self.n_items += y.numel()

    def finish(self) -> TrainStats:
        """The epoch's statistics, read back with the one host-device sync of the epoch."""
        if self.n_steps == 0:
            raise ValueError("the training data yielded no batch: the dataset is smaller than one batch")
        finite = [s.finite_flag() for s in self.seeded]
        host_finite = torch.stack([torch.isfinite(p).all() for p in self.model.host_parameters()]).all()
        head = torch.stack([self.loss_sum, self.correct.float(), host_finite.float()])
        flags = torch.stack(finite).float() if finite else self.grad_sums.new_zeros(0)
        packed = torch.cat([head, self.grad_sums, flags]).tolist()
        names = [s.slot_id.name for s in self.seeded]
        k = len(names)
        return TrainStats(
            loss=packed[0] / self.n_steps,
            accuracy=100.0 * packed[1] / self.n_items,
            seed_grad_norm={n: g / self.n_steps for n, g in zip(names, packed[3 : 3 + k], strict=True)},
            seed_finite={n: f > 0.5 for n, f in zip(names, packed[3 + k :], strict=True)},
            host_finite=packed[2] > 0.5,
        )


@torch.no_grad()
def validate(
    model: MorphogeneticModel, batches: Iterable[Batch], ablate: tuple[str, ...], amp: Precision | None = None
) -> ValidationStats:
    """Loss and accuracy, plus the accuracy with each slot in `ablate` at alpha 0, in one pass.

    Each batch runs the model once, and each ablation reruns only the part of the network after
    its slot (see `MorphogeneticModel.forward_with_ablations`).
    """
    model.eval()
    device = next(model.parameters()).device
    sums = torch.zeros(2 + len(ablate), device=device)  # loss * n, correct, correct per ablation
    n_items = 0
    for x, y in _nonempty(batches):
        with autocast(amp, x.device):
            logits, ablated = model.forward_with_ablations(x, ablate)
        loss, correct = loss_and_correct(logits, y)
        ablated_correct = [loss_and_correct(ablated[name], y)[1] for name in ablate]
        sums += torch.stack([loss * y.numel(), correct, *ablated_correct]).float()
        n_items += y.numel()
    values = sums.tolist()  # the one sync of the pass
    return ValidationStats(
        loss=values[0] / n_items,
        accuracy=100.0 * values[1] / n_items,
        ablated_accuracy={name: 100.0 * v / n_items for name, v in zip(ablate, values[2:], strict=True)},
    )


def _nonempty(batches: Iterable[Batch]) -> Iterator[Batch]:
    seen = False
    for batch in batches:
        seen = True
        yield batch
    if not seen:
        raise ValueError("the validation data yielded no batch")
