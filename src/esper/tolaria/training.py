"""One training epoch and one fused validation pass: the single implementation of each.

Both keep every running sum on the device and synchronise with the host once, at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from esper.kasmina import MorphogeneticModel

Batch = tuple[torch.Tensor, torch.Tensor]


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


def train_epoch(
    model: MorphogeneticModel,
    batches: Iterable[Batch],
    optimizers: list[torch.optim.Optimizer],
) -> TrainStats:
    """Train every parameter of `model` for one pass over `batches` with all `optimizers`.

    The host optimizer and one optimizer per seed step together after each backward pass.
    Gradient norms of every seed are collected here, the one place gradients are inspected.
    """
    model.train()
    seeded = [s for s in model.ordered_slots() if s.seed is not None]
    device = next(model.parameters()).device
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.int64)
    grad_sums = torch.zeros(len(seeded), device=device)
    n_steps, n_items = 0, 0
    for x, y in batches:
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss, batch_correct = loss_and_correct(model(x), y)
        loss.backward()
        if seeded:
            grad_sums += torch.stack([seed_gradient_norm(s.seed) for s in seeded])  # type: ignore[arg-type]
        for opt in optimizers:
            opt.step()
        loss_sum += loss.detach()
        correct += batch_correct
        n_steps += 1
        n_items += y.numel()
    if n_steps == 0:
        raise ValueError("the training data yielded no batch: the dataset is smaller than one batch")
    finite = [s.finite_flag() for s in seeded]
    host_finite = torch.stack([torch.isfinite(p).all() for p in model.host_parameters()]).all()
    head = torch.stack([loss_sum, correct.float(), host_finite.float()])
    flags = torch.stack(finite).float() if finite else grad_sums.new_zeros(0)
    packed = torch.cat([head, grad_sums, flags]).tolist()  # the one sync of the epoch
    names = [s.slot_id.name for s in seeded]
    k = len(names)
    return TrainStats(
        loss=packed[0] / n_steps,
        accuracy=100.0 * packed[1] / n_items,
        seed_grad_norm={n: g / n_steps for n, g in zip(names, packed[3 : 3 + k], strict=True)},
        seed_finite={n: f > 0.5 for n, f in zip(names, packed[3 + k :], strict=True)},
        host_finite=packed[2] > 0.5,
    )


@torch.no_grad()
def validate(model: MorphogeneticModel, batches: Iterable[Batch], ablate: tuple[str, ...]) -> ValidationStats:
    """Loss and accuracy, plus the accuracy with each slot in `ablate` at alpha 0, in one pass.

    Each batch runs the model once, and each ablation reruns only the part of the network after
    its slot (see `MorphogeneticModel.forward_with_ablations`).
    """
    model.eval()
    device = next(model.parameters()).device
    sums = torch.zeros(2 + len(ablate), device=device)  # loss * n, correct, correct per ablation
    n_items = 0
    for x, y in _nonempty(batches):
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
