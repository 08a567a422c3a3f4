"""The observation a learned controller sees: a fixed-size vector with a documented layout.

Layout: the global block, then one block per slot in host order, then (a policy run with
`--observe-budget`) the compute budget's block: the share of the budget spent, and per slot and
blueprint whether a germination there now fits it. Every feature is scaled
deterministically here (fractions, logs of parameter counts, bounded squashes), so values stay
in a small range before any running normalisation. An empty slot's block is all zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from esper.kasmina.blueprints import Topology, blueprint_names
from esper.leyline import SeedStage, SlotSignals, TrainingSignals

GLOBAL_FEATURES: tuple[str, ...] = (
    "epoch_fraction",  # epoch / max_epochs: time is in the observation
    "train_loss",  # log1p(loss)
    "val_loss",  # log1p(loss)
    "train_accuracy",  # / 100
    "val_accuracy",  # / 100
    "val_accuracy_delta",  # tanh(delta / 5 points)
    "val_loss_delta",  # tanh(delta)
    "best_val_accuracy",  # / 100
    "plateau_fraction",  # plateau epochs / max_epochs
    "host_params_log",  # log10(1 + n) / 10
    "seed_param_fraction",  # share / (1 + share) = seed params / all params: bounded in [0, 1)
    "seed_budget_used",  # germinations / max_germinations (1 when the budget is 0)
    "since_germination_fraction",  # min(epochs since germination / max_epochs, 1)
)

SEED_STAGES: tuple[SeedStage, ...] = (
    SeedStage.GERMINATED,
    SeedStage.TRAINING,
    SeedStage.BLENDING,
    SeedStage.PROBATIONARY,
    SeedStage.FOSSILIZED,
)
"""Stages in which a slot holds a seed: the stage one-hot covers only these, so an empty slot
(DORMANT, CULLED, EMBARGOED, RESETTING) has an all-zero block; the masks say what it can take."""

CONTRIBUTION_SCALE = 5.0
"""Contributions (percentage points) are squashed as tanh(c / 5): a few points is a strong signal."""


def _slot_feature_names(topology: Topology, width_blueprints: tuple[str, ...] = ()) -> tuple[str, ...]:
    return (
        "present",
        *(f"stage_{s.name.lower()}" for s in SEED_STAGES),
        "alpha",
        "epochs_in_stage_fraction",
        "contribution",  # tanh(c / CONTRIBUTION_SCALE), 0 when not measured
        "contribution_measured",
        "grad_norm_log",  # log1p(norm) / 10
        "grad_vanishing",
        "grad_exploding",
        *(f"blueprint_{b}" for b in (*blueprint_names(topology), *width_blueprints)),
        "param_share",  # seed params / host params
    )


@dataclass(frozen=True)
class ObservationLayout:
    """Names and offsets of every observation feature, derived from the host's slots."""

    topology: Topology
    slot_names: tuple[str, ...]
    width_blueprints: tuple[str, ...] = ()
    """Width blueprints a run allows: each gets a one-hot after the residual ones, so a policy
    sees which kind of seed a slot holds. None allowed: the layout of every earlier policy."""
    budget_blueprints: tuple[str, ...] = ()
    """Blueprints whose fit under the compute budget the policy sees, per slot (`esper ppo
    --observe-budget`: the blueprints it may choose). The masks alone keep a policy within the
    budget but do not tell its value or its choices when a dearer seed will fit. None: no budget
    block, the layout of every earlier policy."""

    @property
    def slot_features(self) -> tuple[str, ...]:
        return _slot_feature_names(self.topology, self.width_blueprints)

    @property
    def blueprints(self) -> tuple[str, ...]:
        """The blueprint one-hot's order."""
        return (*blueprint_names(self.topology), *self.width_blueprints)

    @property
    def budget_features(self) -> tuple[str, ...]:
        if not self.budget_blueprints:
            return ()
        fits = tuple(f"{slot}.fits_{b}" for slot in self.slot_names for b in self.budget_blueprints)
        return ("compute_budget_used", *fits)

    @property
    def obs_dim(self) -> int:
        return len(GLOBAL_FEATURES) + len(self.slot_names) * len(self.slot_features) + len(self.budget_features)

    def slot_slice(self, name: str) -> slice:
        """Where slot `name`'s block sits in the observation."""
        index = self.slot_names.index(name)
        width = len(self.slot_features)
        start = len(GLOBAL_FEATURES) + index * width
        return slice(start, start + width)

    def feature_names(self) -> tuple[str, ...]:
        per_slot = tuple(f"{slot}.{f}" for slot in self.slot_names for f in self.slot_features)
        return GLOBAL_FEATURES + per_slot + self.budget_features

    def featurize(self, signals: TrainingSignals) -> torch.Tensor:
        """The observation for one env, float32 of shape (obs_dim,)."""
        if tuple(s.name for s in signals.slots) != self.slot_names:
            raise ValueError(
                f"signals have slots {[s.name for s in signals.slots]}, layout has {list(self.slot_names)}"
            )
        values = _global_features(signals)
        for slot in signals.slots:
            values += self._slot_features(slot, signals)
        if self.budget_blueprints:
            values += self._budget_features(signals)
        return torch.tensor(values, dtype=torch.float32)

    def _budget_features(self, signals: TrainingSignals) -> list[float]:
        """The budget's share spent (capped at 2), then per slot and blueprint 1 where a
        germination now fits: the env's verdict (`SlotSignals.affords`, none in a slot that holds
        a seed) under a budget, every empty slot without one."""
        fits = [
            float(s.affords(b) if s.affordable_blueprints is not None else s.seed_id is None)
            for s in signals.slots
            for b in self.budget_blueprints
        ]
        return [min(signals.compute_budget_used, 2.0), *fits]

    def _slot_features(self, s: SlotSignals, signals: TrainingSignals) -> list[float]:
        if s.seed_id is None:
            return [0.0] * len(self.slot_features)
        measured = s.contribution is not None
        grad = s.grad_norm
        return [
            1.0,
            *(float(s.stage is stage) for stage in SEED_STAGES),
            s.alpha,
            min(s.epochs_in_stage / signals.max_epochs, 1.0),
            math.tanh(s.contribution / CONTRIBUTION_SCALE) if measured else 0.0,
            float(measured),
            math.log1p(grad) / 10.0 if grad is not None and math.isfinite(grad) else 0.0,
            float(s.grad_vanishing),
            float(s.grad_exploding),
            *(float(s.blueprint == b) for b in self.blueprints),
            s.param_count / max(signals.host_params, 1),
        ]


def _global_features(s: TrainingSignals) -> list[float]:
    return [
        s.epoch / s.max_epochs,
        math.log1p(max(s.train_loss, 0.0)),
        math.log1p(max(s.val_loss, 0.0)),
        s.train_accuracy / 100.0,
        s.val_accuracy / 100.0,
        math.tanh(s.val_accuracy_delta / 5.0),
        math.tanh(s.val_loss_delta),
        s.best_val_accuracy / 100.0,
        min(s.plateau_epochs / s.max_epochs, 1.0),
        math.log10(1 + s.host_params) / 10.0,
        s.seed_param_share / (1.0 + s.seed_param_share),
        s.seeds_germinated / s.max_germinations if s.max_germinations > 0 else 1.0,
        min(s.epochs_since_germination / s.max_epochs, 1.0),
    ]
