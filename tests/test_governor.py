"""Governor: blow-up detection and rollback to a consistent, trainable state."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import make_env
from esper.leyline import Decision, GateThresholds, LifecycleOp, SeedStage
from esper.tolaria import Governor, GovernorConfig
from esper.tolaria.environment import ROLLED_BACK, MorphogeneticEnv


def test_judge_flags_non_finite_and_blowups_only() -> None:
    gov = Governor(GovernorConfig(blowup_factor=3.0, history=3, min_history=2))
    assert gov.judge(float("nan"), 1.0) is not None
    assert gov.judge(1.0, float("inf")) is not None
    assert gov.judge(100.0, 1.0) is None  # no history yet: only non-finite values count
    gov.record_healthy(1.0, {}, {})
    gov.record_healthy(1.2, {}, {})
    assert gov.judge(3.2, 1.0) is None
    assert "blow-up" in gov.judge(3.4, 1.0)


def poison_next_epoch(env: MorphogeneticEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next training epoch diverge after the decision has been executed."""
    original = env._train_epoch

    def poisoned():
        with torch.no_grad():
            next(env.model.host.parameters()).fill_(float("nan"))
        monkeypatch.setattr(env, "_train_epoch", original)
        return original()

    monkeypatch.setattr(env, "_train_epoch", poisoned)


def assert_consistent_and_trainable(env: MorphogeneticEnv) -> None:
    model = env.model
    for slot in model.ordered_slots():
        name = slot.slot_id.name
        assert (slot.seed is not None) == slot.lifecycle.has_seed, name
        if slot.seed is None:
            assert name not in env.seed_optimizers
        else:
            opt_params = env.seed_optimizers[name].param_groups[0]["params"]
            assert [id(p) for p in opt_params] == [id(p) for p in slot.seed.parameters()]
    host_opt_params = env.host_optimizer.param_groups[0]["params"]
    assert [id(p) for p in host_opt_params] == [id(p) for p in model.host.parameters()]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    result = env.step(Decision.wait())
    assert result.panic is None and math.isfinite(result.signals.train_loss)


def run_to_probation(env: MorphogeneticEnv, slot: str) -> None:
    env.step(Decision(LifecycleOp.GERMINATE, slot, "conv_light"))
    while env.model.slot(slot).stage is not SeedStage.PROBATIONARY:
        env.step(Decision.wait())


def test_rollback_after_germinate(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(max_epochs=8)
    env.reset(0)
    env.step(Decision.wait())
    reference = {k: v.clone() for k, v in env.model.state_dict().items() if isinstance(v, torch.Tensor)}
    poison_next_epoch(env, monkeypatch)
    result = env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_heavy"))
    assert result.panic is not None and "non-finite" in result.panic
    assert env.model.slot("mid").stage is SeedStage.DORMANT and env.model.slot("mid").seed is None
    restored = env.model.state_dict()
    assert all(torch.equal(restored[k], v) for k, v in reference.items())
    assert env.records[-1].final_stage == ROLLED_BACK
    assert env.governor.rollbacks == 1
    assert_consistent_and_trainable(env)


def test_rollback_after_cull_restores_the_seed_and_its_optimizer(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(max_epochs=10)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_light"))
    env.step(Decision.wait())
    seed_state = {k: v.clone() for k, v in env.model.slot("early").seed.state_dict().items()}
    adam_steps = env.seed_optimizers["early"].state_dict()["state"][0]["step"].item()
    poison_next_epoch(env, monkeypatch)
    result = env.step(Decision(LifecycleOp.CULL, "early"))
    assert result.panic is not None
    slot = env.model.slot("early")
    assert slot.stage is SeedStage.TRAINING and slot.seed_id == "seed-1"
    assert all(torch.equal(slot.seed.state_dict()[k], v) for k, v in seed_state.items())
    assert env.seed_optimizers["early"].state_dict()["state"][0]["step"].item() == adam_steps
    assert env.records[0].final_stage == "TRAINING"  # the cull was undone and the history says so
    assert [s for _, s in env.records[0].stage_history].count("CULLED") == 1
    assert_consistent_and_trainable(env)


def test_rollback_after_fossilize(monkeypatch: pytest.MonkeyPatch) -> None:
    lenient = GateThresholds(probation_cull_contribution=-100.0, fossilize_min_contribution=-100.0)
    env = make_env(max_epochs=14, thresholds=lenient)
    env.reset(0)
    run_to_probation(env, "late")
    env.step(Decision.wait())
    poison_next_epoch(env, monkeypatch)
    result = env.step(Decision(LifecycleOp.FOSSILIZE, "late"))
    assert result.panic is not None
    assert env.model.slot("late").stage is SeedStage.PROBATIONARY
    assert_consistent_and_trainable(env)


def test_snapshot_is_not_aliased_by_later_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rolling back twice to the same snapshot restores the same values both times."""
    env = make_env(max_epochs=8)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    reference = {k: v.clone() for k, v in env.model.state_dict().items() if isinstance(v, torch.Tensor)}
    for _ in range(2):
        poison_next_epoch(env, monkeypatch)
        assert env.step(Decision.wait()).panic is not None
        restored = env.model.state_dict()
        assert all(torch.equal(restored[k], v) for k, v in reference.items())
