"""The factored action space: every action sampled under the masks is executable."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_env, training_signals
from esper.kasmina import GateRefused, SlotLifecycle, Topology
from esper.leyline import BlendSchedule, GateThresholds, LifecycleOp, SeedStage, SlotSignals, TrainingSignals
from esper.tamiyo import ActionSpace, MaskedCategorical

SLOTS = ("early", "mid", "late")
SPACE = ActionSpace(Topology.CNN, SLOTS)
THRESHOLDS = GateThresholds()

slot_states = st.tuples(
    st.sampled_from(list(SeedStage)),
    st.integers(0, 8),
    st.one_of(st.none(), st.floats(-5, 5)),
    st.booleans(),
)


def make_signals(states, germinated: int, max_germinations: int) -> TrainingSignals:
    slots = tuple(
        SlotSignals(
            name=name,
            index=i,
            enabled=enabled,
            stage=stage,
            epochs_in_stage=epochs,
            alpha=0.0,
            blueprint=None,
            seed_id=None,
            contribution=contribution,
            grad_norm=None,
            param_count=0,
        )
        for i, (name, (stage, epochs, contribution, enabled)) in enumerate(zip(SLOTS, states, strict=True))
    )
    return training_signals(
        slots,
        epoch=3,
        max_epochs=20,
        plateau_epochs=0,
        seeds_germinated=germinated,
        max_germinations=max_germinations,
        epochs_since_germination=3,
    )


@settings(max_examples=300, deadline=None)
@given(st.tuples(slot_states, slot_states, slot_states), st.integers(0, 4), st.integers(0, 4), st.integers(0, 2**31))
def test_every_action_sampled_under_the_masks_is_executable(states, germinated, max_germinations, seed) -> None:
    signals = make_signals(states, germinated, max_germinations)
    g = torch.Generator().manual_seed(seed)
    op_mask = SPACE.op_mask(signals, THRESHOLDS)
    assert op_mask[LifecycleOp.WAIT]
    op = LifecycleOp(int(MaskedCategorical(torch.zeros(4), op_mask).sample(g)))
    slot = int(MaskedCategorical(torch.zeros(3), SPACE.slot_mask(op, signals, THRESHOLDS)).sample(g))
    blueprint = int(MaskedCategorical(torch.zeros(len(SPACE.blueprints)), SPACE.blueprint_mask()).sample(g))
    schedule = int(torch.randint(0, 2, (1,), generator=g))
    decision = SPACE.decode(int(op), slot, blueprint, schedule)
    if op is LifecycleOp.WAIT:
        assert decision.slot is None
        return
    stage, epochs, contribution, enabled = states[slot]
    assert enabled, "an op never lands on a disabled slot"
    lifecycle = SlotLifecycle(THRESHOLDS)
    lifecycle.load_state_dict({"stage": int(stage), "epochs_in_stage": epochs, "schedule": 0})
    if op is LifecycleOp.GERMINATE:
        assert germinated < max_germinations
        lifecycle.germinate(BlendSchedule.LINEAR)  # raises GateRefused if the mask was wrong
    elif op is LifecycleOp.FOSSILIZE:
        lifecycle.fossilize(contribution)
    else:
        lifecycle.cull()


@settings(max_examples=100, deadline=None)
@given(st.tuples(slot_states, slot_states, slot_states), st.integers(0, 4), st.integers(0, 4))
def test_an_op_is_allowed_exactly_when_some_slot_can_take_it(states, germinated, max_germinations) -> None:
    signals = make_signals(states, germinated, max_germinations)
    op_mask = SPACE.op_mask(signals, THRESHOLDS)
    for op in LifecycleOp:
        executable = []
        for stage, epochs, contribution, enabled in states:
            lifecycle = SlotLifecycle(THRESHOLDS)
            lifecycle.load_state_dict({"stage": int(stage), "epochs_in_stage": epochs, "schedule": 0})
            try:
                if op is LifecycleOp.GERMINATE:
                    if germinated >= max_germinations:
                        raise GateRefused("budget")
                    lifecycle.germinate(BlendSchedule.LINEAR)
                elif op is LifecycleOp.FOSSILIZE:
                    lifecycle.fossilize(contribution)
                elif op is LifecycleOp.CULL:
                    lifecycle.cull()
                executable.append(enabled)
            except GateRefused:
                executable.append(False)
        assert bool(op_mask[op]) == (op is LifecycleOp.WAIT or any(executable)), op.name


@pytest.mark.slow
def test_random_masked_policy_drives_a_real_env_without_a_refusal() -> None:
    env = make_env(max_epochs=14, slots=("early", "late"), max_germinations=3)
    space = ActionSpace(Topology.CNN, SLOTS, allowed_blueprints=("conv_light", "norm"))
    g = torch.Generator().manual_seed(0)
    env.reset(0)
    ops = []
    done = False
    while not done:
        signals = env.signals
        op = int(MaskedCategorical(torch.zeros(4), space.op_mask(signals, env.config.thresholds)).sample(g))
        slot = int(
            MaskedCategorical(torch.zeros(3), space.slot_mask(LifecycleOp(op), signals, env.config.thresholds)).sample(
                g
            )
        )
        bp = int(MaskedCategorical(torch.zeros(len(space.blueprints)), space.blueprint_mask()).sample(g))
        decision = space.decode(op, slot, bp, 1)
        ops.append(decision.op)
        done = env.step(decision).done  # the env refuses anything not executable
        assert decision.slot in (None, "early", "late")
        assert decision.blueprint in (None, "conv_light", "norm")
    assert LifecycleOp.GERMINATE in ops


def test_head_sizes_and_activity() -> None:
    assert SPACE.head_sizes == (4, 3, 6, 2)
    assert SPACE.head_active(LifecycleOp.WAIT).tolist() == [True, False, False, False]
    assert SPACE.head_active(LifecycleOp.CULL).tolist() == [True, True, False, False]
    assert SPACE.head_active(LifecycleOp.GERMINATE).tolist() == [True, True, True, True]
    with pytest.raises(ValueError, match="lora"):
        ActionSpace(Topology.CNN, SLOTS, allowed_blueprints=("lora",))
