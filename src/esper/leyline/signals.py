"""Training signals: what a controller sees after each epoch, per slot and in fixed slot order.

The contract between an environment, which produces them, and a controller, which reads them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from esper.leyline.constants import gradient_is_exploding, gradient_is_vanishing
from esper.leyline.stages import SeedStage


@dataclass(frozen=True)
class SlotSignals:
    """One slot's state after an epoch. An empty slot has stage DORMANT/EMBARGOED/... and no seed."""

    name: str
    index: int
    enabled: bool
    stage: SeedStage
    epochs_in_stage: int
    alpha: float
    blueprint: str | None
    seed_id: str | None
    contribution: float | None
    """What the gates and controllers read (points; None unless blended): validation accuracy with
    the seed minus with its alpha forced to 0, or the loss reading (`GateThresholds.keep_reading`)."""
    grad_norm: float | None
    """The seed's mean gradient norm over the epoch; None when it received no gradient."""
    param_count: int
    loss_contribution: float | None = None
    """Validation loss with the seed's alpha forced to 0 minus with the seed (nats; positive: it
    helps); None unless blended. Continuous, so less noisy per image than the accuracy reading
    (`experiments/keep-cull-reading`); with `GateThresholds.keep_reading` "loss", `contribution`
    is this reading in points."""
    accuracy_contribution: float | None = None
    """Validation accuracy with the seed minus with its alpha forced to 0 (points); None unless
    blended. `contribution` under `keep_reading` "accuracy": carried whichever reading decides,
    so a study of the readings (`counterfactual_retest.py`) compares like with like."""
    affordable_blueprints: tuple[str, ...] | None = None
    """Under a compute budget (`GateThresholds.compute_budget`), the blueprints a germination
    here now stays within it with (empty where no germination is possible now); None: no
    budget. The env refuses any other; controllers read it through `affords`."""

    def affords(self, blueprint: str) -> bool:
        """A germination of `blueprint` here keeps the run within its compute budget (always, with none)."""
        return self.affordable_blueprints is None or blueprint in self.affordable_blueprints

    @property
    def grad_vanishing(self) -> bool:
        return gradient_is_vanishing(self.grad_norm)

    @property
    def grad_exploding(self) -> bool:
        return gradient_is_exploding(self.grad_norm)


@dataclass(frozen=True)
class BudgetProjections:
    """A run's training FLOPs projected to its last epoch, in start-host runs, against its
    compute budget (`GateThresholds.compute_budget`): what G0 decides on, and what a controller
    planning several seeds needs to know which fit together (`HeuristicConfig.grow_together`)."""

    budget: float
    standing: float
    """With no further germination (every live seed blended in, or merged if dearer)."""
    per_slot: Mapping[str, Mapping[str, float]]
    """Per slot, per blueprint: with that seed germinated there now (empty: no germination)."""

    def affordable(self) -> dict[str, tuple[str, ...]]:
        """Per slot, the blueprints a germination now keeps within the budget: what G0 allows."""
        return {name: tuple(bp for bp, s in by_bp.items() if s <= self.budget) for name, by_bp in self.per_slot.items()}


@dataclass(frozen=True)
class TrainingSignals:
    """Global signals of one env after an epoch, with every slot's signals in host order."""

    epoch: int
    max_epochs: int
    train_loss: float
    train_accuracy: float
    val_loss: float
    val_accuracy: float
    val_accuracy_delta: float
    val_loss_delta: float
    best_val_accuracy: float
    plateau_epochs: int
    host_params: int
    seed_params: int
    seeds_germinated: int
    max_germinations: int
    epochs_since_germination: int
    slots: tuple[SlotSignals, ...]
    extra_compute_share: float = 0.0
    """Training FLOPs spent so far beyond what the start host alone would have spent on the same
    epochs, over the start host's whole run: 0 for a static host. A reward's compute price
    charges it (`esper.simic.rewards`); the observation does not show it."""
    compute_budget_used: float = 0.0
    """Training FLOPs spent so far over the run's compute budget (`GateThresholds.compute_budget`
    start-host runs): 0 without a budget, 1 when spent. A policy run with `--observe-budget` sees
    it, so it can tell how much of the budget its growth has left."""
    budget_projections: BudgetProjections | None = None
    """Where the run's training FLOPs end against its compute budget, as it stands and with each
    germination open now; None without a budget. The observation does not show it."""

    @property
    def seed_param_share(self) -> float:
        """The parameters of the seeds alive now (fossilized included) over the host's own: the
        one definition of the parameter share (the objective prices it, the observation shows it)."""
        return self.seed_params / max(self.host_params, 1)

    def slot(self, name: str) -> SlotSignals:
        for s in self.slots:
            if s.name == name:
                return s
        raise KeyError(name)
