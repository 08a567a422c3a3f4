"""Named constants shared across packages, each with the reason for its value.

Accuracies and contributions are in percentage points (0..100) everywhere in Esper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

GRAD_NORM_VANISHING: float = 1e-7
"""A seed whose mean gradient norm over an epoch is below this is not learning."""

GRAD_NORM_EXPLODING: float = 1e3
"""A seed whose mean gradient norm over an epoch is above this is unstable."""


def gradient_is_vanishing(grad_norm: float | None) -> bool:
    """A measured gradient norm too small for the seed to be learning."""
    return grad_norm is not None and grad_norm <= GRAD_NORM_VANISHING


def gradient_is_exploding(grad_norm: float | None) -> bool:
    """A measured gradient norm that is non-finite or too large to be stable."""
    return grad_norm is not None and (not math.isfinite(grad_norm) or grad_norm >= GRAD_NORM_EXPLODING)


def gradient_is_healthy(grad_norm: float | None) -> bool:
    """Measured, and neither vanishing nor exploding: what G2 asks for."""
    return grad_norm is not None and not gradient_is_vanishing(grad_norm) and not gradient_is_exploding(grad_norm)


KEEP_READINGS: tuple[str, ...] = ("accuracy", "loss")
"""What a seed's contribution is read from: see `GateThresholds.keep_reading`."""

LOSS_READING_POINTS_PER_NAT: float = 37.0
"""Points of selection accuracy per nat of selection loss, to put the loss reading on the
accuracy reading's scale: the least-squares slope of a seed's accuracy contribution on its loss
contribution, both measured on 20,000 fresh images, `shapes`, seeds 150..159, 2026-11-26
(experiments/keep-cull-reading). Another task has another slope; its sign is the task's own."""


@dataclass(frozen=True)
class GateThresholds:
    """The conditions of the lifecycle gates G0..G5 and of the automatic culls.

    Every gate reads explicit inputs (stage, epochs in stage, alpha, counterfactual contribution,
    gradient norm); none reads telemetry.

    G0 germinate       DORMANT -> GERMINATED   slot empty; blueprint valid for the host (checked by
                                              the model, which owns the blueprints); within the
                                              seed budget and the `compute_budget` (checked by
                                              the env, which owns both).
    G1 start training  GERMINATED -> TRAINING  seed parameters are finite; checked right after G0, so
                                              no epoch is spent untrained.
    G2 start blending  TRAINING -> BLENDING    at least `min_training_epochs` in TRAINING and the
                                              seed's mean gradient norm is healthy (finite, above
                                              GRAD_NORM_VANISHING, below GRAD_NORM_EXPLODING).
    G3 probation       BLENDING -> PROBATIONARY alpha has reached 1 (`blend_epochs` ticks).
    G4 fossilize       PROBATIONARY -> FOSSILIZED on a FOSSILIZE op: at least
                                              `min_probation_epochs` in PROBATIONARY and
                                              contribution > `fossilize_min_contribution`.
    G5 release         EMBARGOED -> RESETTING  `embargo_epochs` ticks after a cull.

    Automatic culls at a tick (no controller needed):
    - PROBATIONARY with a measured contribution <= `probation_cull_contribution` (0: a seed
      that does not help is removed).
    - PROBATIONARY for more than `probation_timeout_epochs` without being fossilized.
    - TRAINING for `max_training_epochs` epochs without passing G2.
    - Any live seed whose parameters or gradients are non-finite.
    """

    min_training_epochs: int = 3
    """Dwell in TRAINING: enough epochs for the seed to learn something before it is blended."""

    max_training_epochs: int = 12
    """A seed that cannot pass G2 in this many epochs has unhealthy gradients: cull it."""

    blend_epochs: int = 3
    """Epochs over which alpha goes from 0 to 1; long enough for the host to adapt."""

    min_probation_epochs: int = 1
    """At least one full counterfactual measurement at alpha 1 before a seed can be kept."""

    probation_timeout_epochs: int = 6
    """A controller that never decides cannot keep a seed in probation forever."""

    fossilize_min_contribution: float = 0.0
    """G4 requires a contribution strictly above this (percentage points)."""

    probation_cull_contribution: float = 0.0
    """A probationary seed whose contribution is at or below this is culled automatically."""

    embargo_epochs: int = 2
    """Rest after a cull, so a controller cannot churn germinate/cull in one slot."""

    width_training_epochs: int = 1
    """`min_training_epochs` for a width seed. Its new units join with zero outgoing weights, so
    blending them in cannot disturb the host, and every epoch they wait is an epoch of the
    wider network lost: on the shapes frontier (seeds 200..204, 2026-11-26) `widen_25` in every
    block at epoch 5 ended 2.05 points below static width 10 with 3 + 3 epochs of dwell, and on
    the static front with 1 + 1."""

    width_blend_epochs: int = 1
    """`blend_epochs` for a width seed (see `width_training_epochs`)."""

    keep_reading: str = "loss"
    """What a seed's contribution (the gates', the controllers' and the observation's) is read
    from, both in one measurement pass: `loss`, selection loss without the seed minus with it,
    put in points by `LOSS_READING_POINTS_PER_NAT`; `accuracy`, selection accuracy with the seed
    minus with its alpha forced to 0 (the default until 2026-11-27). The loss reading's spread
    against 20,000 fresh images is about 6 times smaller (0.06 to 0.08 points against 0.37 to
    0.46 on first readings), and the tuned shapes heuristic deciding on it gained 1.78 points of
    selection accuracy [+0.21, +3.35] over 20 paired seeds, culling fewer of its seeds
    (experiments/keep-cull-reading)."""

    compute_budget: float | None = None
    """Most training FLOPs an episode may spend, in runs of its start host (1.5 lets growth add
    half a static run's compute); None: no limit. G0 refuses a germination that, projected to
    the episode's last epoch with the new seed and every live seed blended in (or merged, if
    dearer), would exceed it
    (`ComputeMeter.projected_train_share`), so a run ends within it whatever its seeds do. A
    controller reads the verdict as `SlotSignals.affordable_blueprints`."""

    def __post_init__(self) -> None:
        names = ("min_training_epochs", "blend_epochs", "min_probation_epochs", "embargo_epochs")
        for name in (*names, "width_training_epochs", "width_blend_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_training_epochs < self.min_training_epochs:
            raise ValueError("max_training_epochs must be >= min_training_epochs")
        if self.probation_timeout_epochs < self.min_probation_epochs:
            raise ValueError("probation_timeout_epochs must be >= min_probation_epochs")
        if self.max_training_epochs < self.width_training_epochs:
            raise ValueError("max_training_epochs must be >= width_training_epochs")
        if self.keep_reading not in KEEP_READINGS:
            raise ValueError(f"keep_reading {self.keep_reading!r}: choose from {' '.join(KEEP_READINGS)}")
        if self.compute_budget is not None and not self.compute_budget >= 1.0:
            raise ValueError(
                f"compute_budget must be >= 1 (the start host's own run) or unset, got {self.compute_budget}"
            )

    def for_width_seed(self) -> GateThresholds:
        """The thresholds a width seed's lifecycle runs under: its own dwell times."""
        return replace(self, min_training_epochs=self.width_training_epochs, blend_epochs=self.width_blend_epochs)
