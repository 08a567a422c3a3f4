"""The single environment: step phases, determinism, signals per slot, errors."""

from __future__ import annotations

import pytest
import torch

from conftest import assert_signals_measure_the_model_left, make_env, tiny_text_task
from esper.kasmina import GateRefused
from esper.leyline import Decision, GateThresholds, InvalidDecision, LifecycleOp, SeedStage
from esper.tolaria import TASKS
from esper.tolaria.seeds import SeedRecord


def run(env, decisions):
    env.reset(7)
    return [env.step(d) for d in decisions]


def test_same_seed_same_trajectory() -> None:
    decisions = [Decision(LifecycleOp.GERMINATE, "mid", "conv_light"), *[Decision.wait()] * 4]
    a = [r.signals for r in run(make_env(), decisions)]
    b = [r.signals for r in run(make_env(), decisions)]
    assert a == b


def test_decision_is_executed_before_the_epoch_and_stamped_with_it() -> None:
    env = make_env()
    env.reset(0)
    result = env.step(Decision(LifecycleOp.GERMINATE, "late", "attention"))
    assert [(slot, c.target) for slot, c in result.changes] == [
        ("late", SeedStage.GERMINATED),
        ("late", SeedStage.TRAINING),
    ]
    assert env.seeds.records[0].stage_history == [(1, "GERMINATED"), (1, "TRAINING")]
    assert result.signals.slot("late").grad_norm > 0  # it trained during this very epoch


def test_each_slot_signal_belongs_to_its_slot() -> None:
    env = make_env(max_epochs=10)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "late", "conv_light"))
    result = None
    while env.model.slot("late").stage is not SeedStage.BLENDING:
        result = env.step(Decision.wait())
    signals = result.signals
    early, mid, late = signals.slots
    assert (early.name, mid.name, late.name) == ("early", "mid", "late")
    assert late.blueprint == "conv_light" and late.seed_id == "seed-1" and late.param_count > 0
    assert late.grad_norm is not None and late.stage is SeedStage.BLENDING
    for empty in (early, mid):
        assert empty.seed_id is None and empty.param_count == 0 and empty.grad_norm is None
        assert empty.contribution is None and empty.alpha == 0.0
    assert signals.seed_params == late.param_count


def test_contribution_is_measured_for_blended_seeds() -> None:
    env = make_env(max_epochs=10)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_heavy"))
    contributions = []
    for _ in range(6):
        s = env.step(Decision.wait()).signals.slot("mid")
        contributions.append((s.stage, s.contribution))
    assert any(stage is SeedStage.PROBATIONARY and c is not None for stage, c in contributions)
    assert all(c is None for stage, c in contributions if stage is SeedStage.TRAINING)


def test_invalid_decisions_raise_and_change_nothing() -> None:
    env = make_env(slots=("early", "mid"), max_germinations=1)
    env.reset(0)
    with pytest.raises(InvalidDecision, match="not enabled"):
        env.step(Decision(LifecycleOp.GERMINATE, "late", "conv_light"))
    with pytest.raises(ValueError, match="unknown blueprint 'mlp'"):
        env.step(Decision(LifecycleOp.GERMINATE, "early", "mlp"))
    with pytest.raises(GateRefused, match="G4"):
        env.step(Decision(LifecycleOp.FOSSILIZE, "early"))
    with pytest.raises(GateRefused, match="nothing live to cull"):
        env.step(Decision(LifecycleOp.CULL, "early"))
    assert env.clock.epoch == 0 and env.seeds.germinated == 0
    env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_light"))
    with pytest.raises(GateRefused, match="budget"):
        env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    with pytest.raises(GateRefused, match="G0"):
        env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_light"))
    assert env.clock.epoch == 1 and env.model.slot("mid").stage is SeedStage.DORMANT


def test_episode_ends_after_max_epochs() -> None:
    env = make_env(max_epochs=2)
    env.reset(0)
    assert not env.step(Decision.wait()).done
    assert env.step(Decision.wait()).done
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(Decision.wait())


def test_text_task_grows_a_transformer_seed() -> None:
    env = make_env(tiny_text_task(), max_epochs=4)
    signals = env.reset(0)
    assert signals.val_accuracy >= 0
    result = env.step(Decision(LifecycleOp.GERMINATE, "early", "lora"))
    assert result.signals.slot("early").stage is SeedStage.TRAINING
    assert result.signals.slot("early").param_count == 2 * 32 * 8


def test_events_are_emitted() -> None:
    events = []
    env = make_env()
    env.events.emit = events.append
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "norm"))
    kinds = [e.kind for e in events]
    assert kinds.count("stage_change") == 2 and kinds[-1] == "epoch"
    assert events[-1].data["slots"][1]["blueprint"] == "norm"


@pytest.mark.slow
def test_lifecycle_is_identical_with_and_without_telemetry(tmp_path) -> None:
    """Gates read explicit inputs, never telemetry: a silent env and a logged env agree exactly."""
    from esper.nissa import JsonlBackend, TelemetryHub

    decisions = [Decision(LifecycleOp.GERMINATE, "early", "conv_light"), *[Decision.wait()] * 5]
    silent = run(make_env(), decisions)
    hub = TelemetryHub([JsonlBackend(tmp_path / "events.jsonl")])
    logged_env = make_env()
    logged_env.events.emit = hub.emit
    logged = run(logged_env, decisions)
    hub.close()
    assert [r.signals for r in silent] == [r.signals for r in logged]
    assert [r.changes for r in silent] == [r.changes for r in logged]
    assert (tmp_path / "events.jsonl").read_text().count('"kind": "stage_change"') >= 3


def test_after_a_gate_culls_a_blended_seed_the_signals_measure_the_model_left() -> None:
    """A probationary seed culled by its gate was in the model the epoch's measurement saw; the
    step reports a new measurement of the model left."""
    thresholds = GateThresholds(probation_cull_contribution=1e9)  # every probationary seed is culled
    env = make_env(max_epochs=12, thresholds=thresholds)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    with torch.no_grad():  # a seed that changes the output a lot
        for p in env.model.slot("mid").seed.parameters():
            p.add_(2.0 * torch.randn_like(p))
    for _ in range(10):
        result = env.step(Decision.wait())
        if env.model.slot("mid").seed is None:
            break
    assert [(s, c.target) for s, c in result.changes] == [("mid", SeedStage.CULLED)]
    assert_signals_measure_the_model_left(env, result.signals)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_task_declares_the_slots_its_host_has(name: str) -> None:
    """Slot names, masks and spaces are derived from the task without building its host; they
    must be the host's own."""
    task = TASKS[name]
    assert task.slot_ids == task.build_host().slot_ids
    assert task.slot_ids == task.build_host(task.host_width + 3).slot_ids


def test_a_seed_record_says_why_its_seed_was_culled() -> None:
    """The episode's record keeps the cull's cause: a gate's reading, or the controller's reason;
    a rollback that undoes the cull forgets it; the field survives JSON."""
    thresholds = GateThresholds(probation_cull_contribution=1e9)  # every probationary seed is culled
    env = make_env(max_epochs=12, thresholds=thresholds)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    while env.model.slot("mid").seed is not None:
        env.step(Decision.wait())
    (gated,) = env.seeds.records
    assert gated.final_stage == "CULLED" and gated.cull_reason.startswith("auto-cull: contribution")
    assert SeedRecord.from_json(gated.to_json()) == gated

    env = make_env(max_epochs=6)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "late", "conv_light"))
    assert env.seeds.records[0].cull_reason is None
    before = env.seeds.counters()
    env.step(Decision(LifecycleOp.CULL, "late", reason="too slow"))
    assert env.seeds.records[0].cull_reason == "too slow"
    env.seeds.restore_counters(before)
    assert env.seeds.records[0].cull_reason is None and env.seeds.records[0].final_stage == "TRAINING"


def test_a_seed_record_saved_before_cull_reasons_loads() -> None:
    old = {"seed_id": "seed-1", "slot": "mid", "blueprint": "widen_50", "schedule": "linear", "param_count": 5,
           "stage_history": [[3, "GERMINATED"], [5, "CULLED"]], "final_stage": "CULLED"}  # fmt: skip
    assert SeedRecord.from_json(old).cull_reason is None
