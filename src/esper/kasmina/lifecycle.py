"""The seed lifecycle of one slot as a pure state machine: no torch, no telemetry.

Every stage change goes through `_move`, which checks the leyline transition table, so no
sequence of operations can produce an invalid transition. Gates read only the explicit
`GateInputs` they are given; the environment computes those inputs every epoch whether or not
anyone is watching.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from esper.kasmina.blending import blend_alpha
from esper.leyline import (
    LIVE_STAGES,
    SEED_BEARING_STAGES,
    BlendSchedule,
    GateThresholds,
    SeedStage,
    check_transition,
)
from esper.leyline.constants import gradient_is_healthy


@dataclass(frozen=True)
class GateInputs:
    """What the gates may look at after an epoch.

    contribution: validation accuracy with the seed minus with its alpha forced to 0
        (percentage points); None when the seed was not blended this epoch.
    grad_norm: the seed's mean gradient norm over the epoch; None when it received no gradient.
    finite: the seed's parameters and gradients are all finite.
    """

    contribution: float | None = None
    grad_norm: float | None = None
    finite: bool = True


@dataclass(frozen=True)
class StageChange:
    """One transition, with the gate or rule that caused it."""

    source: SeedStage
    target: SeedStage
    reason: str


@dataclass(frozen=True)
class GateResult:
    passed: bool
    gate: str
    reason: str


class GateRefused(RuntimeError):
    """An operation was asked for while its gate does not pass (a controller or mask bug)."""


def germinate_gate(stage: SeedStage) -> GateResult:
    """G0 as a pure function of the slot's stage (the seed budget and blueprint are checked by
    the env, which owns them). Action masks call the same function the lifecycle does."""
    ok = stage is SeedStage.DORMANT
    return GateResult(ok, "G0", "slot is dormant" if ok else f"slot is {stage.name}, not DORMANT")


def fossilize_gate(
    stage: SeedStage, epochs_in_stage: int, contribution: float | None, thresholds: GateThresholds
) -> GateResult:
    """G4 as a pure function of explicit inputs."""
    if stage is not SeedStage.PROBATIONARY:
        return GateResult(False, "G4", f"seed is {stage.name}, not PROBATIONARY")
    if epochs_in_stage < thresholds.min_probation_epochs:
        return GateResult(False, "G4", f"{epochs_in_stage} < {thresholds.min_probation_epochs} probation epochs")
    if contribution is None or not contribution > thresholds.fossilize_min_contribution:
        return GateResult(False, "G4", f"contribution {contribution} not > {thresholds.fossilize_min_contribution}")
    return GateResult(True, "G4", f"contribution {contribution:.3f} after {epochs_in_stage} probation epochs")


def cull_gate(stage: SeedStage) -> GateResult:
    ok = stage in LIVE_STAGES
    return GateResult(ok, "cull", "seed is live" if ok else f"slot is {stage.name}: nothing live to cull")


@dataclass
class SlotLifecycle:
    """Stage, dwell time and blend schedule of one slot's seed."""

    thresholds: GateThresholds = field(default_factory=GateThresholds)
    stage: SeedStage = SeedStage.DORMANT
    epochs_in_stage: int = 0
    schedule: BlendSchedule = BlendSchedule.LINEAR

    # ----------------------------------------------------------------- derived state
    @property
    def alpha(self) -> float:
        """Blend weight used by the forward pass this epoch.

        In BLENDING, the k-th epoch (k = epochs_in_stage + 1) trains at schedule(k / blend_epochs),
        so no blending epoch is wasted at alpha 0 and the last one reaches exactly 1.
        """
        if self.stage is SeedStage.BLENDING:
            return blend_alpha(self.schedule, (self.epochs_in_stage + 1) / self.thresholds.blend_epochs)
        if self.stage in (SeedStage.PROBATIONARY, SeedStage.FOSSILIZED):
            return 1.0
        return 0.0

    @property
    def has_seed(self) -> bool:
        return self.stage in SEED_BEARING_STAGES

    @property
    def is_live(self) -> bool:
        return self.stage in LIVE_STAGES

    # ----------------------------------------------------------------- gates
    def gate_germinate(self) -> GateResult:
        return germinate_gate(self.stage)

    def gate_fossilize(self, contribution: float | None) -> GateResult:
        return fossilize_gate(self.stage, self.epochs_in_stage, contribution, self.thresholds)

    def gate_cull(self) -> GateResult:
        return cull_gate(self.stage)

    # ----------------------------------------------------------------- operations
    def germinate(self, schedule: BlendSchedule) -> StageChange:
        self._require(self.gate_germinate())
        self.schedule = schedule
        return self._move(SeedStage.GERMINATED, "G0: germinated")

    def start_training(self, finite: bool) -> StageChange:
        """G1, checked right after germination so that no epoch is spent untrained."""
        if self.stage is not SeedStage.GERMINATED:
            raise GateRefused(f"G1: seed is {self.stage.name}, not GERMINATED")
        if not finite:
            return self._move(SeedStage.CULLED, "G1 failed: non-finite initial parameters")
        return self._move(SeedStage.TRAINING, "G1: parameters finite")

    def fossilize(self, contribution: float | None) -> StageChange:
        result = self.gate_fossilize(contribution)
        self._require(result)
        return self._move(SeedStage.FOSSILIZED, f"G4: {result.reason}")

    def cull(self, reason: str = "culled by controller") -> StageChange:
        self._require(self.gate_cull())
        return self._move(SeedStage.CULLED, reason)

    def tick(self, inputs: GateInputs) -> list[StageChange]:
        """Advance one epoch: count dwell time, then apply automatic gates and culls."""
        self.epochs_in_stage += 1
        t = self.thresholds
        stage, n = self.stage, self.epochs_in_stage
        if stage in LIVE_STAGES and not inputs.finite:
            return [self._move(SeedStage.CULLED, "auto-cull: non-finite parameters or gradients")]
        if stage is SeedStage.TRAINING:
            if n >= t.min_training_epochs and gradient_is_healthy(inputs.grad_norm):
                return [self._move(SeedStage.BLENDING, f"G2: {n} epochs trained, grad norm {inputs.grad_norm:.3g}")]
            if n >= t.max_training_epochs:
                return [self._move(SeedStage.CULLED, f"auto-cull: G2 not passed in {n} epochs")]
        elif stage is SeedStage.BLENDING:
            if n >= t.blend_epochs:
                return [self._move(SeedStage.PROBATIONARY, "G3: alpha reached 1")]
        elif stage is SeedStage.PROBATIONARY:
            c = inputs.contribution
            if c is not None and c <= t.probation_cull_contribution:
                return [
                    self._move(SeedStage.CULLED, f"auto-cull: contribution {c:.3f} <= {t.probation_cull_contribution}")
                ]
            if n > t.probation_timeout_epochs:
                return [self._move(SeedStage.CULLED, f"auto-cull: probation timeout after {n} epochs")]
        elif stage is SeedStage.CULLED:
            return [self._move(SeedStage.EMBARGOED, "embargo begins")]
        elif stage is SeedStage.EMBARGOED:
            if n >= t.embargo_epochs:
                return [self._move(SeedStage.RESETTING, f"G5: embargo of {n} epochs over")]
        elif stage is SeedStage.RESETTING:
            return [self._move(SeedStage.DORMANT, "slot reset")]
        return []

    # ----------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, int]:
        """Plain ints only, so that checkpoints load with `weights_only=True`."""
        return {"stage": int(self.stage), "epochs_in_stage": self.epochs_in_stage, "schedule": int(self.schedule)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.stage = SeedStage(state["stage"])
        self.epochs_in_stage = int(state["epochs_in_stage"])
        self.schedule = BlendSchedule(state["schedule"])

    # ----------------------------------------------------------------- internals
    def _move(self, target: SeedStage, reason: str) -> StageChange:
        check_transition(self.stage, target)
        change = StageChange(self.stage, target, reason)
        self.stage, self.epochs_in_stage = target, 0
        return change

    @staticmethod
    def _require(result: GateResult) -> None:
        if not result.passed:
            raise GateRefused(f"{result.gate}: {result.reason}")
