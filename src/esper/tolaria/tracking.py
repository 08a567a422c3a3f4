"""Signal tracking: an env's per-epoch measurements become the signals a controller reads,
with their history (deltas, best accuracy, plateau length)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from esper.kasmina import MorphogeneticModel
from esper.leyline import BudgetProjections, SlotSignals, TrainingSignals
from esper.tolaria.training import ValidationStats

PLATEAU_MIN_DELTA: float = 0.5
"""Validation accuracy must beat its best by this many points to end a plateau."""


@dataclass(frozen=True)
class EpochMeasurements:
    """Raw results of one epoch's training and validation, in percentage points for accuracies."""

    train_loss: float
    train_accuracy: float
    val_loss: float
    val_accuracy: float


@dataclass
class SignalTracker:
    """Turns per-epoch measurements into signals with history: deltas, best accuracy, plateau.

    One tracker per env; `reset` at every episode start. No slot is ever summarised by another:
    the tracker passes every slot's own signals through in host order.
    """

    plateau_min_delta: float = PLATEAU_MIN_DELTA
    _best: float = field(default=-math.inf, init=False)
    _plateau: int = field(default=0, init=False)
    _previous: EpochMeasurements | None = field(default=None, init=False)

    def reset(self) -> None:
        self._best, self._plateau, self._previous = -math.inf, 0, None

    def update(
        self,
        epoch: int,
        max_epochs: int,
        measured: EpochMeasurements,
        slots: tuple[SlotSignals, ...],
        host_params: int,
        seeds_germinated: int,
        max_germinations: int,
        last_germination_epoch: int | None,
        healthy: bool = True,
        extra_compute_share: float = 0.0,
        compute_budget_used: float = 0.0,
        budget_projections: BudgetProjections | None = None,
    ) -> TrainingSignals:
        """Signals after `epoch`. An unhealthy epoch (rolled back by the governor) repeats the
        last measurements and changes no history: it is neither progress nor a plateau."""
        previous = self._previous or measured
        if healthy:
            if measured.val_accuracy >= self._best + self.plateau_min_delta:
                self._plateau = 0
            elif epoch > 0:
                self._plateau += 1
            self._best = max(self._best, measured.val_accuracy)
            self._previous = measured
        since = epoch if last_germination_epoch is None else epoch - last_germination_epoch
        return TrainingSignals(
            epoch=epoch,
            max_epochs=max_epochs,
            train_loss=measured.train_loss,
            train_accuracy=measured.train_accuracy,
            val_loss=measured.val_loss,
            val_accuracy=measured.val_accuracy,
            val_accuracy_delta=measured.val_accuracy - previous.val_accuracy,
            val_loss_delta=measured.val_loss - previous.val_loss,
            best_val_accuracy=self._best,
            plateau_epochs=self._plateau,
            host_params=host_params,
            seed_params=sum(s.param_count for s in slots),
            seeds_germinated=seeds_germinated,
            max_germinations=max_germinations,
            epochs_since_germination=since,
            slots=slots,
            extra_compute_share=extra_compute_share,
            compute_budget_used=compute_budget_used,
            budget_projections=budget_projections,
        )


def slot_signals(
    model: MorphogeneticModel,
    enabled_slots: tuple[str, ...],
    val: ValidationStats,
    grad_norms: dict[str, float],
    affordable: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[SlotSignals, ...]:
    """Every slot's own signals, in host order: an empty slot reports no seed, contribution or
    gradient; a seed's contribution is the one `val` measured, its gradient norm the epoch's;
    `affordable` holds the enabled slots' blueprints within a compute budget (None: no budget)."""
    return tuple(
        SlotSignals(
            name=s.slot_id.name,
            index=s.slot_id.index,
            enabled=s.slot_id.name in enabled_slots,
            stage=s.stage,
            epochs_in_stage=s.lifecycle.epochs_in_stage,
            alpha=s.alpha if s.lifecycle.has_seed else 0.0,  # a merged width seed is in at alpha 1
            blueprint=s.blueprint,
            seed_id=s.seed_id,
            contribution=val.contribution(s.slot_id.name) if s.seed is not None else None,
            grad_norm=grad_norms.get(s.slot_id.name) if s.seed is not None else None,
            param_count=s.param_count(),
            loss_contribution=val.loss_contribution(s.slot_id.name) if s.seed is not None else None,
            accuracy_contribution=val.accuracy_contribution(s.slot_id.name) if s.seed is not None else None,
            affordable_blueprints=None if affordable is None else affordable.get(s.slot_id.name, ()),
        )
        for s in model.ordered_slots()
    )
