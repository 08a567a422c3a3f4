"""The seed lifecycle state machine (`SlotLifecycle`) and the alpha schedules (`blend_alpha`).

Pure state-machine tests: no torch, no model. Each lifecycle path is pinned by its own test,
with exact epoch counts for the gates of the default `GateThresholds`; property-based tests
then drive random operation sequences and random (valid and invalid) thresholds.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import enum_name
from esper.kasmina.blending import blend_alpha
from esper.kasmina.lifecycle import (
    GateInputs,
    GateRefused,
    SlotLifecycle,
    StageChange,
)
from esper.leyline import (
    LIVE_STAGES,
    SEED_BEARING_STAGES,
    TRANSITIONS,
    BlendSchedule,
    GateThresholds,
    SeedStage,
    gradient_is_healthy,
)
from esper.leyline.constants import GRAD_NORM_EXPLODING, GRAD_NORM_VANISHING

S = SeedStage


NAN, INF = math.nan, math.inf

HEALTHY = GateInputs(grad_norm=1.0)
"""A training epoch whose gradient passes G2's health check."""

QUIET = GateInputs()
"""An epoch with no measurement at all (finite, no contribution, no gradient)."""

SCHEDULES = list(BlendSchedule)
NON_LIVE_STAGES = [s for s in S if s not in LIVE_STAGES]


# --------------------------------------------------------------------------- helpers
def edges(changes: list[StageChange]) -> list[tuple[SeedStage, SeedStage]]:
    return [(c.source, c.target) for c in changes]


def drive_to(
    stage: SeedStage,
    thresholds: GateThresholds | None = None,
    schedule: BlendSchedule = BlendSchedule.LINEAR,
) -> SlotLifecycle:
    """A lifecycle brought to `stage` through legal operations, with epochs_in_stage == 0."""
    t = thresholds or GateThresholds()
    lc = SlotLifecycle(t)
    if stage is S.DORMANT:
        return lc
    if stage in (S.CULLED, S.EMBARGOED, S.RESETTING):
        lc.germinate(schedule)
        lc.cull()
        if stage is not S.CULLED:
            lc.tick(QUIET)
        if stage is S.RESETTING:
            for _ in range(t.embargo_epochs):
                lc.tick(QUIET)
        assert lc.stage is stage
        return lc
    lc.germinate(schedule)
    if stage is not S.GERMINATED:
        lc.start_training(True)
    if stage in (S.BLENDING, S.PROBATIONARY, S.FOSSILIZED):
        for _ in range(t.min_training_epochs):
            lc.tick(HEALTHY)
    if stage in (S.PROBATIONARY, S.FOSSILIZED):
        for _ in range(t.blend_epochs):
            lc.tick(QUIET)
    if stage is S.FOSSILIZED:
        good = max(t.fossilize_min_contribution, t.probation_cull_contribution) + 1.0
        for _ in range(t.min_probation_epochs):
            lc.tick(GateInputs(contribution=good))
        lc.fossilize(good)
    assert lc.stage is stage
    assert lc.epochs_in_stage == 0
    return lc


def snapshot(lc: SlotLifecycle) -> tuple[SeedStage, int, BlendSchedule]:
    return lc.stage, lc.epochs_in_stage, lc.schedule


# --------------------------------------------------------------------------- happy path
def test_fresh_lifecycle_is_dormant_without_seed() -> None:
    lc = SlotLifecycle()
    assert (lc.stage, lc.epochs_in_stage, lc.alpha) == (S.DORMANT, 0, 0.0)
    assert not lc.has_seed and not lc.is_live


def test_default_thresholds_are_the_documented_dwell_times() -> None:
    """The epoch counts asserted by the path tests below come from these defaults."""
    t = GateThresholds()
    assert (t.min_training_epochs, t.max_training_epochs, t.blend_epochs) == (3, 12, 3)
    assert (t.min_probation_epochs, t.probation_timeout_epochs, t.embargo_epochs) == (1, 6, 2)
    assert t.fossilize_min_contribution == 0.0 and t.probation_cull_contribution == 0.0


@pytest.mark.parametrize("schedule", SCHEDULES, ids=enum_name)
def test_full_path_dormant_to_fossilized_with_default_dwell_times(schedule: BlendSchedule) -> None:
    """G0, G1, then G2 on exactly the 3rd TRAINING epoch, G3 on exactly the 3rd BLENDING epoch,
    G4 after 1 probation epoch; alpha is 0 before blending, schedule(k/3) in the k-th blending
    epoch, and 1 in PROBATIONARY and FOSSILIZED."""
    lc = SlotLifecycle()

    change = lc.germinate(schedule)
    assert edges([change]) == [(S.DORMANT, S.GERMINATED)]
    assert (lc.stage, lc.schedule, lc.epochs_in_stage, lc.alpha) == (S.GERMINATED, schedule, 0, 0.0)
    assert lc.has_seed and lc.is_live

    change = lc.start_training(True)
    assert edges([change]) == [(S.GERMINATED, S.TRAINING)]
    assert (lc.stage, lc.epochs_in_stage, lc.alpha) == (S.TRAINING, 0, 0.0)

    # G2: not before the 3rd training epoch, even with healthy gradients.
    for epoch in (1, 2):
        assert lc.tick(HEALTHY) == []
        assert (lc.stage, lc.epochs_in_stage, lc.alpha) == (S.TRAINING, epoch, 0.0)
    assert edges(lc.tick(HEALTHY)) == [(S.TRAINING, S.BLENDING)]
    assert (lc.stage, lc.epochs_in_stage) == (S.BLENDING, 0)

    # G3: the k-th blending epoch trains at schedule(k / 3); the 3rd reaches exactly 1.
    alphas = []
    for k in (1, 2, 3):
        assert lc.stage is S.BLENDING and lc.epochs_in_stage == k - 1
        assert lc.alpha == blend_alpha(schedule, k / 3)
        alphas.append(lc.alpha)
        changes = lc.tick(QUIET)
        assert edges(changes) == ([] if k < 3 else [(S.BLENDING, S.PROBATIONARY)])
    assert 0.0 < alphas[0] < alphas[1] < alphas[2] == 1.0
    if schedule is BlendSchedule.LINEAR:
        assert alphas == pytest.approx([1 / 3, 2 / 3, 1.0])

    assert (lc.stage, lc.epochs_in_stage, lc.alpha) == (S.PROBATIONARY, 0, 1.0)
    with pytest.raises(GateRefused, match="G4"):
        lc.fossilize(5.0)  # 0 < min_probation_epochs
    assert lc.tick(GateInputs(contribution=5.0)) == []
    assert (lc.stage, lc.epochs_in_stage, lc.alpha) == (S.PROBATIONARY, 1, 1.0)

    change = lc.fossilize(5.0)
    assert edges([change]) == [(S.PROBATIONARY, S.FOSSILIZED)]
    assert change.reason.startswith("G4")
    assert (lc.stage, lc.epochs_in_stage, lc.alpha) == (S.FOSSILIZED, 0, 1.0)
    assert lc.has_seed and not lc.is_live


def test_g2_needs_only_the_current_epochs_gradient_to_be_healthy() -> None:
    """Unhealthy epochs before a healthy one do not delay G2 once the dwell time is met."""
    lc = drive_to(S.TRAINING)
    for _ in range(4):
        assert lc.tick(GateInputs(grad_norm=None)) == []
    assert edges(lc.tick(HEALTHY)) == [(S.TRAINING, S.BLENDING)]


def test_g2_at_the_last_allowed_epoch_wins_over_the_training_cull() -> None:
    lc = drive_to(S.TRAINING)
    for _ in range(11):
        assert lc.tick(GateInputs(grad_norm=0.0)) == []
    assert edges(lc.tick(HEALTHY)) == [(S.TRAINING, S.BLENDING)]


def test_blending_ignores_contribution_and_gradient() -> None:
    """G3 depends only on the blend dwell time: a negative contribution or a bad gradient during
    BLENDING neither culls the seed nor delays probation."""
    lc = drive_to(S.BLENDING)
    bad = GateInputs(contribution=-50.0, grad_norm=None)
    assert lc.tick(bad) == [] and lc.tick(bad) == []
    assert edges(lc.tick(bad)) == [(S.BLENDING, S.PROBATIONARY)]


def test_germinated_waits_for_start_training() -> None:
    """Ticks do not move GERMINATED forward: only start_training (G1) does."""
    lc = drive_to(S.GERMINATED)
    for epoch in range(1, 4):
        assert lc.tick(HEALTHY) == []
        assert (lc.stage, lc.epochs_in_stage) == (S.GERMINATED, epoch)


# --------------------------------------------------------------------------- culls and embargo
@pytest.mark.parametrize("stage", sorted(LIVE_STAGES), ids=enum_name)
def test_cull_from_each_live_stage_then_embargo_then_dormant(stage: SeedStage) -> None:
    """CULLED lasts one tick, EMBARGOED exactly embargo_epochs (2) ticks, RESETTING one tick."""
    lc = drive_to(stage)
    change = lc.cull("test reason")
    assert edges([change]) == [(stage, S.CULLED)]
    assert change.reason == "test reason"
    assert (lc.stage, lc.epochs_in_stage, lc.alpha) == (S.CULLED, 0, 0.0)
    assert not lc.has_seed and not lc.is_live

    assert edges(lc.tick(QUIET)) == [(S.CULLED, S.EMBARGOED)]
    assert lc.tick(QUIET) == []
    assert (lc.stage, lc.epochs_in_stage) == (S.EMBARGOED, 1)
    assert edges(lc.tick(QUIET)) == [(S.EMBARGOED, S.RESETTING)]
    assert edges(lc.tick(QUIET)) == [(S.RESETTING, S.DORMANT)]
    assert (lc.stage, lc.epochs_in_stage, lc.alpha) == (S.DORMANT, 0, 0.0)

    # The slot can take a new seed again.
    assert edges([lc.germinate(BlendSchedule.SIGMOID)]) == [(S.DORMANT, S.GERMINATED)]
    assert lc.schedule is BlendSchedule.SIGMOID


@pytest.mark.parametrize("embargo", [1, 3, 7])
def test_embargo_lasts_exactly_embargo_epochs(embargo: int) -> None:
    lc = drive_to(S.EMBARGOED, GateThresholds(embargo_epochs=embargo))
    for epoch in range(1, embargo):
        assert lc.tick(QUIET) == []
        assert (lc.stage, lc.epochs_in_stage) == (S.EMBARGOED, epoch)
    assert edges(lc.tick(QUIET)) == [(S.EMBARGOED, S.RESETTING)]


def test_g1_refuses_non_finite_initial_parameters_by_culling() -> None:
    lc = drive_to(S.GERMINATED)
    change = lc.start_training(False)
    assert edges([change]) == [(S.GERMINATED, S.CULLED)]
    assert change.reason.startswith("G1")
    assert lc.stage is S.CULLED and lc.alpha == 0.0


@pytest.mark.parametrize("stage", [s for s in S if s is not S.GERMINATED], ids=enum_name)
def test_start_training_refused_outside_germinated(stage: SeedStage) -> None:
    lc = drive_to(stage)
    before = snapshot(lc)
    for finite in (True, False):
        with pytest.raises(GateRefused, match="G1"):
            lc.start_training(finite)
    assert snapshot(lc) == before


UNHEALTHY_GRADS = [
    None,
    0.0,
    1e-12,
    GRAD_NORM_VANISHING,
    GRAD_NORM_EXPLODING,
    1e9,
    -1.0,
    NAN,
    INF,
    -INF,
]


@pytest.mark.parametrize("grad_norm", UNHEALTHY_GRADS, ids=repr)
def test_training_auto_culled_after_max_training_epochs_with_unhealthy_gradients(
    grad_norm: float | None,
) -> None:
    """Missing, vanishing, exploding or NaN gradients keep G2 shut; on the 12th TRAINING epoch
    the seed is culled."""
    lc = drive_to(S.TRAINING)
    inputs = GateInputs(grad_norm=grad_norm)
    for epoch in range(1, 12):
        assert lc.tick(inputs) == []
        assert (lc.stage, lc.epochs_in_stage) == (S.TRAINING, epoch)
    changes = lc.tick(inputs)
    assert edges(changes) == [(S.TRAINING, S.CULLED)]
    assert "auto-cull" in changes[0].reason


@pytest.mark.parametrize(
    ("grad_norm", "healthy"),
    [
        (None, False),
        (NAN, False),
        (INF, False),
        (-INF, False),
        (-1.0, False),
        (0.0, False),
        (GRAD_NORM_VANISHING, False),
        (GRAD_NORM_VANISHING * 1.01, True),
        (1.0, True),
        (GRAD_NORM_EXPLODING * 0.99, True),
        (GRAD_NORM_EXPLODING, False),
    ],
    ids=repr,
)
def test_gradient_health_bounds_are_exclusive(grad_norm: float | None, healthy: bool) -> None:
    assert gradient_is_healthy(grad_norm) is healthy


@pytest.mark.parametrize("contribution", [0.0, -0.0, -1e-9, -3.0, -INF], ids=repr)
def test_probationary_auto_culled_when_contribution_not_positive(contribution: float) -> None:
    lc = drive_to(S.PROBATIONARY)
    changes = lc.tick(GateInputs(contribution=contribution))
    assert edges(changes) == [(S.PROBATIONARY, S.CULLED)]
    assert "contribution" in changes[0].reason


def test_probationary_not_culled_when_contribution_is_unmeasured() -> None:
    """None means "not measured", never "zero": only the timeout can cull such a seed."""
    lc = drive_to(S.PROBATIONARY)
    for epoch in range(1, 7):
        assert lc.tick(GateInputs(contribution=None)) == []
        assert (lc.stage, lc.epochs_in_stage) == (S.PROBATIONARY, epoch)


def test_probation_cull_threshold_is_inclusive() -> None:
    t = GateThresholds(probation_cull_contribution=1.0)
    lc = drive_to(S.PROBATIONARY, t)
    assert lc.tick(GateInputs(contribution=1.5)) == []
    assert edges(lc.tick(GateInputs(contribution=1.0))) == [(S.PROBATIONARY, S.CULLED)]


def test_probation_timeout_culls_after_more_than_timeout_epochs() -> None:
    """A helpful but never-fossilized seed may stay 6 probation epochs; the 7th tick culls it.
    Fossilizing is still allowed at the 6th."""
    lc = drive_to(S.PROBATIONARY)
    good = GateInputs(contribution=2.0)
    for epoch in range(1, 7):
        assert lc.tick(good) == []
        assert (lc.stage, lc.epochs_in_stage) == (S.PROBATIONARY, epoch)
    assert lc.gate_fossilize(2.0).passed
    changes = lc.tick(good)
    assert edges(changes) == [(S.PROBATIONARY, S.CULLED)]
    assert "timeout" in changes[0].reason


@pytest.mark.parametrize("stage", sorted(LIVE_STAGES), ids=enum_name)
def test_non_finite_auto_culls_every_live_stage(stage: SeedStage) -> None:
    """Non-finite wins over every other rule, even on an epoch where a gate would pass."""
    t = GateThresholds(min_training_epochs=1, blend_epochs=1)
    lc = drive_to(stage, t)
    changes = lc.tick(GateInputs(contribution=5.0, grad_norm=1.0, finite=False))
    assert edges(changes) == [(stage, S.CULLED)]
    assert "non-finite" in changes[0].reason


@pytest.mark.parametrize("stage", NON_LIVE_STAGES, ids=enum_name)
def test_non_finite_inputs_ignored_outside_live_stages(stage: SeedStage) -> None:
    lc = drive_to(stage)
    expected = {
        S.DORMANT: [],
        S.FOSSILIZED: [],
        S.CULLED: [(S.CULLED, S.EMBARGOED)],
        S.EMBARGOED: [],
        S.RESETTING: [(S.RESETTING, S.DORMANT)],
    }[stage]
    assert edges(lc.tick(GateInputs(contribution=-5.0, grad_norm=NAN, finite=False))) == expected


# --------------------------------------------------------------------------- refused operations
def test_fossilize_refused_before_min_probation_epochs() -> None:
    t = GateThresholds(min_probation_epochs=3, probation_timeout_epochs=6)
    lc = drive_to(S.PROBATIONARY, t)
    for epoch in range(3):
        assert lc.epochs_in_stage == epoch
        before = snapshot(lc)
        with pytest.raises(GateRefused, match="G4"):
            lc.fossilize(10.0)
        assert snapshot(lc) == before
        lc.tick(GateInputs(contribution=10.0))
    assert edges([lc.fossilize(10.0)]) == [(S.PROBATIONARY, S.FOSSILIZED)]


@pytest.mark.parametrize("contribution", [None, 0.0, -0.0, -2.0, NAN, -INF], ids=repr)
def test_fossilize_refused_without_positive_contribution(contribution: float | None) -> None:
    lc = drive_to(S.PROBATIONARY)
    lc.tick(QUIET)
    before = snapshot(lc)
    assert not lc.gate_fossilize(contribution).passed
    with pytest.raises(GateRefused, match="G4"):
        lc.fossilize(contribution)
    assert snapshot(lc) == before


def test_fossilize_threshold_is_strict() -> None:
    t = GateThresholds(fossilize_min_contribution=2.0, probation_cull_contribution=-1.0)
    lc = drive_to(S.PROBATIONARY, t)
    lc.tick(QUIET)
    with pytest.raises(GateRefused, match="G4"):
        lc.fossilize(2.0)
    assert lc.fossilize(2.001).target is S.FOSSILIZED


@pytest.mark.parametrize("stage", [s for s in S if s is not S.PROBATIONARY], ids=enum_name)
def test_fossilize_refused_outside_probationary(stage: SeedStage) -> None:
    lc = drive_to(stage)
    before = snapshot(lc)
    with pytest.raises(GateRefused, match="G4"):
        lc.fossilize(50.0)
    assert snapshot(lc) == before


@pytest.mark.parametrize("stage", [s for s in S if s is not S.DORMANT], ids=enum_name)
def test_germinate_refused_when_not_dormant(stage: SeedStage) -> None:
    """A refused germinate changes nothing, not even the stored blend schedule."""
    lc = drive_to(stage, schedule=BlendSchedule.LINEAR)
    before = snapshot(lc)
    assert not lc.gate_germinate().passed
    with pytest.raises(GateRefused, match="G0"):
        lc.germinate(BlendSchedule.SIGMOID)
    assert snapshot(lc) == before


@pytest.mark.parametrize("stage", NON_LIVE_STAGES, ids=enum_name)
def test_cull_refused_when_nothing_live(stage: SeedStage) -> None:
    lc = drive_to(stage)
    before = snapshot(lc)
    assert not lc.gate_cull().passed
    with pytest.raises(GateRefused, match="cull"):
        lc.cull()
    assert snapshot(lc) == before


def test_fossilized_is_terminal() -> None:
    """Ticks of any kind keep a fossilized seed at alpha 1, and it can never be culled."""
    lc = drive_to(S.FOSSILIZED)
    hostile = [
        QUIET,
        GateInputs(contribution=-100.0),
        GateInputs(grad_norm=NAN),
        GateInputs(finite=False),
    ]
    for i, inputs in enumerate(hostile * 5, start=1):
        assert lc.tick(inputs) == []
        assert (lc.stage, lc.epochs_in_stage, lc.alpha) == (S.FOSSILIZED, i, 1.0)
    with pytest.raises(GateRefused):
        lc.cull()
    assert lc.stage is S.FOSSILIZED
    assert TRANSITIONS[S.FOSSILIZED] == frozenset()


# --------------------------------------------------------------------------- persistence
@pytest.mark.parametrize("stage", list(S), ids=enum_name)
def test_state_dict_is_plain_ints_and_round_trips(stage: SeedStage) -> None:
    lc = drive_to(stage, schedule=BlendSchedule.SIGMOID)
    lc.epochs_in_stage = 0 if stage in (S.CULLED, S.RESETTING) else 1
    state = lc.state_dict()
    assert all(type(v) is int for v in state.values())
    other = SlotLifecycle(lc.thresholds)
    other.load_state_dict(state)
    assert other == lc
    assert other.alpha == lc.alpha


# --------------------------------------------------------------------------- property-based
@st.composite
def valid_thresholds(draw: st.DrawFn, small: bool = False) -> GateThresholds:
    hi = 2 if small else 10
    min_training = draw(st.integers(1, hi))
    min_probation = draw(st.integers(1, hi))
    return GateThresholds(
        min_training_epochs=min_training,
        max_training_epochs=draw(st.integers(min_training, min_training + hi)),
        blend_epochs=draw(st.integers(1, hi)),
        min_probation_epochs=min_probation,
        probation_timeout_epochs=draw(st.integers(min_probation, min_probation + hi)),
        fossilize_min_contribution=draw(st.floats(-hi, hi)),
        probation_cull_contribution=draw(st.floats(-hi, hi)),
        embargo_epochs=draw(st.integers(1, hi)),
    )


HOSTILE_VALUES: list[float | None] = [
    None,
    0.0,
    -0.0,
    -1.0,
    1e-8,
    GRAD_NORM_VANISHING,
    GRAD_NORM_EXPLODING,
    5e3,
    NAN,
    INF,
    -INF,
]
PLAUSIBLE_VALUES: list[float] = [0.5, 1.0, 2.0, 3.0, 10.0]
OP_WEIGHTS = {"germinate": 8, "start_training": 10, "fossilize": 15, "cull": 2, "tick": 65}
"""Ticks dominate and culls are rare, as in a real run, so random runs reach every stage."""
OP_TABLE = [name for name, weight in OP_WEIGHTS.items() for _ in range(weight)]


@st.composite
def operation_sequences(draw: st.DrawFn) -> list[tuple[str, object]]:
    """Random lifecycle operations, decoded from raw bytes (drawing each op and float with its
    own strategy is ten times slower). Gate input values come from a per-example pool: about 80%
    plausible (healthy gradient norms, positive contributions) so that runs get deep, the rest
    hostile (None, zero, negative, vanishing, exploding, NaN, infinite, arbitrary floats)."""
    plausible = PLAUSIBLE_VALUES + draw(st.lists(st.floats(1e-3, 100.0), min_size=3, max_size=3))
    hostile = HOSTILE_VALUES + draw(st.lists(st.floats(), min_size=3, max_size=3))

    def value(byte: int) -> float | None:
        return plausible[byte % len(plausible)] if byte < 205 else hostile[byte % len(hostile)]

    raw = draw(st.binary(min_size=4 * 40, max_size=4 * 120))
    ops: list[tuple[str, object]] = []
    for i in range(0, len(raw) - 3, 4):
        k, a, b, c = raw[i : i + 4]
        name = OP_TABLE[k % len(OP_TABLE)]
        if name == "germinate":
            ops.append((name, SCHEDULES[a % len(SCHEDULES)]))
        elif name == "start_training":
            ops.append((name, a >= 32))
        elif name == "fossilize":
            ops.append((name, value(a)))
        elif name == "cull":
            ops.append((name, None))
        else:
            ops.append((name, GateInputs(contribution=value(a), grad_norm=value(b), finite=c >= 8)))
    return ops


def expected_refusal(lc: SlotLifecycle, name: str, arg: object) -> bool:
    """Whether the gate of `name` must refuse in the lifecycle's current state."""
    t = lc.thresholds
    if name == "germinate":
        return lc.stage is not S.DORMANT
    if name == "start_training":
        return lc.stage is not S.GERMINATED
    if name == "cull":
        return lc.stage not in LIVE_STAGES
    if name == "fossilize":
        return not (
            lc.stage is S.PROBATIONARY
            and lc.epochs_in_stage >= t.min_probation_epochs
            and arg is not None
            and arg > t.fossilize_min_contribution
        )
    return False


def apply(lc: SlotLifecycle, name: str, arg: object) -> list[StageChange]:
    if name == "tick":
        return lc.tick(arg)
    if name == "cull":
        return [lc.cull()]
    return [getattr(lc, name)(arg)]


def check_invariants(lc: SlotLifecycle) -> None:
    t = lc.thresholds
    alpha = lc.alpha
    assert 0.0 <= alpha <= 1.0
    if lc.stage in (S.PROBATIONARY, S.FOSSILIZED):
        assert alpha == 1.0
    elif lc.stage is S.BLENDING:
        assert alpha == blend_alpha(lc.schedule, (lc.epochs_in_stage + 1) / t.blend_epochs)
    else:
        assert alpha == 0.0
    assert lc.has_seed == (lc.stage in SEED_BEARING_STAGES)
    assert lc.is_live == (lc.stage in LIVE_STAGES)
    # Dwell limits: no stage outlives the rule that ends it.
    limits = {
        S.TRAINING: t.max_training_epochs - 1,
        S.BLENDING: t.blend_epochs - 1,
        S.PROBATIONARY: t.probation_timeout_epochs,
        S.CULLED: 0,
        S.EMBARGOED: t.embargo_epochs - 1,
        S.RESETTING: 0,
    }
    if lc.stage in limits:
        assert lc.epochs_in_stage <= limits[lc.stage]
    # Persistence: a fresh lifecycle (or one in another state) loads to an identical one.
    state = lc.state_dict()
    assert all(type(v) is int for v in state.values())
    fresh = SlotLifecycle(t)
    fresh.load_state_dict(state)
    assert fresh == lc and fresh.alpha == alpha
    dirty = drive_to(S.EMBARGOED, t, BlendSchedule.SIGMOID)
    dirty.load_state_dict(state)
    assert dirty == lc


@settings(max_examples=300, deadline=None)
@given(thresholds=valid_thresholds(small=True), ops=operation_sequences())
def test_random_operation_sequences_keep_the_lifecycle_consistent(
    thresholds: GateThresholds, ops: list[tuple[str, object]]
) -> None:
    """After every operation: each reported transition is in TRANSITIONS, reported changes chain
    from the previous stage to the current one (and nothing else changes the stage), a change
    resets epochs_in_stage to 0, a tick without change adds one epoch, a refused op
    (GateRefused exactly when its gate fails) changes nothing, alpha lies in [0, 1], and
    state_dict round-trips."""
    lc = SlotLifecycle(thresholds)
    for name, arg in ops:
        before = snapshot(lc)
        must_refuse = expected_refusal(lc, name, arg)
        try:
            changes = apply(lc, name, arg)
        except GateRefused:
            assert must_refuse, f"{name}({arg!r}) refused in {before}"
            assert snapshot(lc) == before
            check_invariants(lc)
            continue
        assert not must_refuse, f"{name}({arg!r}) accepted in {before}"

        for change in changes:
            assert change.target in TRANSITIONS[change.source]
            assert isinstance(change.reason, str) and change.reason
        stage = before[0]
        for change in changes:
            assert change.source is stage
            stage = change.target
        assert lc.stage is stage
        if changes:
            assert lc.epochs_in_stage == 0
        else:
            assert name == "tick"
            assert lc.epochs_in_stage == before[1] + 1
        if name == "germinate":
            assert lc.schedule is arg
        else:
            assert lc.schedule is before[2]
        check_invariants(lc)


@settings(max_examples=60, deadline=None)
@given(t=valid_thresholds(), schedule=st.sampled_from(SCHEDULES))
def test_happy_path_timing_follows_any_valid_thresholds(t: GateThresholds, schedule: BlendSchedule) -> None:
    """G2 passes on exactly the min_training_epochs-th tick, G3 on the blend_epochs-th with alpha
    schedule(k/blend_epochs), G4 first at min_probation_epochs."""
    lc = drive_to(S.TRAINING, t, schedule)
    for _ in range(t.min_training_epochs - 1):
        assert lc.tick(HEALTHY) == []
    assert edges(lc.tick(HEALTHY)) == [(S.TRAINING, S.BLENDING)]
    for k in range(1, t.blend_epochs + 1):
        assert lc.alpha == blend_alpha(schedule, k / t.blend_epochs)
        expected = [] if k < t.blend_epochs else [(S.BLENDING, S.PROBATIONARY)]
        assert edges(lc.tick(QUIET)) == expected
    assert lc.alpha == 1.0
    good = max(t.fossilize_min_contribution, t.probation_cull_contribution) + 1.0
    for _ in range(t.min_probation_epochs):
        with pytest.raises(GateRefused):
            lc.fossilize(good)
        assert lc.tick(GateInputs(contribution=good)) == []
    assert edges([lc.fossilize(good)]) == [(S.PROBATIONARY, S.FOSSILIZED)]


@settings(max_examples=60, deadline=None)
@given(t=valid_thresholds())
def test_auto_cull_timing_follows_any_valid_thresholds(t: GateThresholds) -> None:
    """Training cull on exactly the max_training_epochs-th tick, probation timeout on the
    (probation_timeout_epochs + 1)-th, embargo of exactly embargo_epochs ticks."""
    lc = drive_to(S.TRAINING, t)
    for _ in range(t.max_training_epochs - 1):
        assert lc.tick(GateInputs(grad_norm=None)) == []
    assert edges(lc.tick(GateInputs(grad_norm=None))) == [(S.TRAINING, S.CULLED)]

    lc = drive_to(S.PROBATIONARY, t)
    for _ in range(t.probation_timeout_epochs):
        assert lc.tick(QUIET) == []
    assert edges(lc.tick(QUIET)) == [(S.PROBATIONARY, S.CULLED)]

    assert edges(lc.tick(QUIET)) == [(S.CULLED, S.EMBARGOED)]
    for _ in range(t.embargo_epochs - 1):
        assert lc.tick(QUIET) == []
    assert edges(lc.tick(QUIET)) == [(S.EMBARGOED, S.RESETTING)]
    assert edges(lc.tick(QUIET)) == [(S.RESETTING, S.DORMANT)]


INT_FIELDS = (
    "min_training_epochs",
    "max_training_epochs",
    "blend_epochs",
    "min_probation_epochs",
    "probation_timeout_epochs",
    "embargo_epochs",
)


MIN_ONE_FIELDS = ("min_training_epochs", "blend_epochs", "min_probation_epochs", "embargo_epochs")


def thresholds_are_valid(v: dict[str, int]) -> bool:
    return (
        all(v[k] >= 1 for k in MIN_ONE_FIELDS)
        and v["max_training_epochs"] >= v["min_training_epochs"]
        and v["probation_timeout_epochs"] >= v["min_probation_epochs"]
    )


@settings(max_examples=200, deadline=None)
@given(values=st.fixed_dictionaries({k: st.integers(-2, 6) for k in INT_FIELDS}))
def test_gate_thresholds_raise_value_error_exactly_when_invalid(values: dict[str, int]) -> None:
    if thresholds_are_valid(values):
        t = GateThresholds(**values)
        assert {k: getattr(t, k) for k in INT_FIELDS} == values
    else:
        with pytest.raises(ValueError):
            GateThresholds(**values)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_training_epochs": 0},
        {"blend_epochs": 0},
        {"blend_epochs": -1},
        {"min_probation_epochs": 0},
        {"embargo_epochs": 0},
        {"min_training_epochs": 5, "max_training_epochs": 4},
        {"min_probation_epochs": 3, "probation_timeout_epochs": 2},
    ],
    ids=repr,
)
def test_invalid_gate_thresholds_raise_value_error(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        GateThresholds(**kwargs)


def test_gate_thresholds_are_frozen() -> None:
    t = GateThresholds()
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.blend_epochs = 5  # type: ignore[misc]


# --------------------------------------------------------------------------- blend_alpha
@pytest.mark.parametrize("schedule", SCHEDULES, ids=enum_name)
def test_blend_alpha_is_exactly_zero_at_start_and_one_at_end(schedule: BlendSchedule) -> None:
    assert blend_alpha(schedule, 0.0) == 0.0
    assert blend_alpha(schedule, 1.0) == 1.0


@pytest.mark.parametrize("schedule", SCHEDULES, ids=enum_name)
@pytest.mark.parametrize(
    ("progress", "expected"),
    [(-0.5, 0.0), (-1e9, 0.0), (-INF, 0.0), (1.5, 1.0), (1e9, 1.0), (INF, 1.0)],
)
def test_blend_alpha_clamps_progress_outside_unit_interval(
    schedule: BlendSchedule, progress: float, expected: float
) -> None:
    assert blend_alpha(schedule, progress) == expected


def test_linear_blend_alpha_is_the_identity_on_the_unit_interval() -> None:
    for p in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
        assert blend_alpha(BlendSchedule.LINEAR, p) == p


def test_sigmoid_blend_alpha_is_symmetric_and_slow_at_the_ends() -> None:
    f = lambda p: blend_alpha(BlendSchedule.SIGMOID, p)  # noqa: E731
    assert f(0.5) == pytest.approx(0.5)
    for p in (0.1, 0.2, 0.3, 0.4):
        assert f(1 - p) == pytest.approx(1 - f(p))
    assert f(0.1) < 0.1 and f(0.9) > 0.9


def test_blend_alpha_rejects_unknown_schedule() -> None:
    with pytest.raises(ValueError):
        blend_alpha("linear", 0.5)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    schedule=st.sampled_from(SCHEDULES),
    a=st.floats(allow_nan=False),
    b=st.floats(allow_nan=False),
)
def test_blend_alpha_is_monotone_and_bounded(schedule: BlendSchedule, a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    alpha_lo, alpha_hi = blend_alpha(schedule, lo), blend_alpha(schedule, hi)
    assert 0.0 <= alpha_lo <= alpha_hi <= 1.0


def test_a_schedule_keeps_a_seed_that_does_not_help() -> None:
    """`schedule:` runs under `keeping_every_seed`: a probationary seed that hurts is neither
    culled on its reading nor refused at G4, and the other gates' rules stand."""
    from esper.runs.eval_run import keeping_every_seed

    t = keeping_every_seed(GateThresholds())
    assert (t.min_training_epochs, t.probation_timeout_epochs) == (3, 6)
    lc = drive_to(S.PROBATIONARY, t)
    assert lc.tick(GateInputs(contribution=-50.0)) == []
    assert lc.gate_fossilize(-50.0).passed
    assert not lc.gate_fossilize(float("nan")).passed
