"""Governor: blow-up detection and rollback to a consistent, trainable state."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import assert_signals_measure_the_model_left, make_env
from esper.leyline import Decision, GateThresholds, LifecycleOp, SeedStage
from esper.tolaria import Governor, GovernorConfig
from esper.tolaria.environment import MorphogeneticEnv
from esper.tolaria.governor import Snapshot


def test_judge_flags_non_finite_and_blowups_only() -> None:
    gov = Governor(GovernorConfig(blowup_factor=3.0, history=3, min_history=2))
    assert gov.judge(float("nan"), 1.0) is not None
    assert gov.judge(1.0, float("inf")) is not None
    assert gov.judge(100.0, 1.0) is None  # no history yet: only non-finite values count
    gov.record_healthy(None, Snapshot({}, {}, {}))  # the untrained model's loss is no reference
    gov.record_healthy(1.0, Snapshot({}, {}, {}))
    assert gov.judge(100.0, 1.0) is None  # one healthy loss is not yet a history
    gov.record_healthy(1.2, Snapshot({}, {}, {}))
    assert gov.judge(3.2, 1.0) is None
    assert "blow-up" in gov.judge(3.4, 1.0)


def poison_next_epoch(env: MorphogeneticEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next training epoch diverge after the decision has been executed."""
    original = env.train_batch

    def poisoned(x, y):
        with torch.no_grad():
            next(env.model.host.parameters()).fill_(float("nan"))
        monkeypatch.setattr(env, "train_batch", original)
        return original(x, y)

    monkeypatch.setattr(env, "train_batch", poisoned)


def assert_consistent_and_trainable(env: MorphogeneticEnv) -> None:
    model = env.model
    for slot in model.ordered_slots():
        name = slot.slot_id.name
        assert (slot.seed is not None) == slot.lifecycle.has_seed, name
        if slot.seed is None:
            assert name not in env.optimizers.seeds
        else:
            opt_params = env.optimizers.seeds[name].param_groups[0]["params"]
            assert [id(p) for p in opt_params] == [id(p) for p in slot.seed.parameters()]
    host_opt_params = env.optimizers.host.param_groups[0]["params"]
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
    assert env.seeds.records == [] and env.seeds.germinated == 0  # the germination never happened
    assert env.governor.rollbacks == 1
    assert_consistent_and_trainable(env)


def test_rollback_after_cull_restores_the_seed_and_its_optimizer(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(max_epochs=10)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_light"))
    env.step(Decision.wait())
    seed_state = {k: v.clone() for k, v in env.model.slot("early").seed.state_dict().items()}
    adam_steps = env.optimizers.seeds["early"].state_dict()["state"][0]["step"].item()
    poison_next_epoch(env, monkeypatch)
    result = env.step(Decision(LifecycleOp.CULL, "early"))
    assert result.panic is not None
    slot = env.model.slot("early")
    assert slot.stage is SeedStage.TRAINING and slot.seed_id == "seed-1"
    assert all(torch.equal(slot.seed.state_dict()[k], v) for k, v in seed_state.items())
    assert env.optimizers.seeds["early"].state_dict()["state"][0]["step"].item() == adam_steps
    assert env.seeds.records[0].final_stage == "TRAINING"
    assert "CULLED" not in [stage for _, stage in env.seeds.records[0].stage_history]  # undone with the rest
    assert_consistent_and_trainable(env)


def test_rollback_after_fossilize(monkeypatch: pytest.MonkeyPatch) -> None:
    lenient = GateThresholds(probation_cull_contribution=-100.0, fossilize_min_contribution=-100.0)
    env = make_env(max_epochs=14, thresholds=lenient)
    env.reset(0)
    run_to_probation(env, "late")
    env.step(Decision.wait())
    poison_next_epoch(env, monkeypatch)
    result = env.step(Decision(LifecycleOp.FOSSILIZE, "late"))
    assert result.panic is not None and result.changes == ()
    assert env.model.slot("late").stage is SeedStage.PROBATIONARY
    assert env.seeds.records[0].final_stage == "PROBATIONARY"
    assert "FOSSILIZED" not in [stage for _, stage in env.seeds.records[0].stage_history]
    assert_consistent_and_trainable(env)


def test_snapshot_is_not_aliased_by_later_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rolling back twice to the same snapshot restores the same values both times."""
    env = make_env(max_epochs=8)
    env.reset(0)
    env.step(Decision.wait())
    reference = {k: v.clone() for k, v in env.model.state_dict().items() if isinstance(v, torch.Tensor)}
    for _ in range(2):
        poison_next_epoch(env, monkeypatch)
        assert env.step(Decision.wait()).panic is not None
        restored = env.model.state_dict()
        assert all(torch.equal(restored[k], v) for k, v in reference.items())


def poison_seed_next_epoch(env: MorphogeneticEnv, slot: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make one seed (not the host) diverge in the next epoch."""
    original = env.train_batch

    def poisoned(x, y):
        with torch.no_grad():
            next(env.model.slot(slot).seed.parameters()).fill_(float("inf"))
        monkeypatch.setattr(env, "train_batch", original)
        return original(x, y)

    monkeypatch.setattr(env, "train_batch", poisoned)


def test_a_diverging_seed_in_training_cannot_poison_the_host() -> None:
    """Straight-through: a non-finite seed in TRAINING leaves the output finite; the seed is culled."""
    env = make_env(max_epochs=6)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    with torch.no_grad():
        next(env.model.slot("mid").seed.parameters()).fill_(float("nan"))
    result = env.step(Decision.wait())
    assert result.panic is None and math.isfinite(result.signals.train_loss)
    assert [(s, c.target) for s, c in result.changes] == [("mid", SeedStage.CULLED)]
    assert_consistent_and_trainable(env)


def test_a_diverging_blended_seed_is_rolled_back_then_culled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blended seed that diverges spreads NaN into the host, so the first rollback cannot
    tell who failed and culls nothing; when it happens again, the non-finite seed is culled."""
    env = make_env(max_epochs=14, governor=GovernorConfig(max_consecutive_rollbacks=5))
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "late", "conv_light"))
    while env.model.slot("late").stage is not SeedStage.BLENDING:
        env.step(Decision.wait())
    host_before = [p.clone() for p in env.model.host.parameters()]
    poison_seed_next_epoch(env, "late", monkeypatch)
    first = env.step(Decision.wait())
    assert first.panic is not None and first.changes == ()
    assert env.model.slot("late").stage is SeedStage.BLENDING
    poison_seed_next_epoch(env, "late", monkeypatch)
    result = env.step(Decision.wait())
    assert result.panic is not None
    assert [(s, c.target) for s, c in result.changes] == [("late", SeedStage.CULLED)]
    assert "diverged" in result.changes[0][1].reason
    assert all(torch.equal(a, b) for a, b in zip(host_before, env.model.host.parameters(), strict=True))
    assert env.seeds.records[0].final_stage == "CULLED"
    # the cull is part of the kept state now: a following rollback does not bring the seed back
    poison_next_epoch(env, monkeypatch)
    assert env.step(Decision.wait()).panic is not None
    assert env.model.slot("late").seed is None and env.seeds.records[0].final_stage == "CULLED"
    assert_consistent_and_trainable(env)


def test_after_a_governor_cull_the_signals_measure_the_model_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last healthy measurement was taken with the seed in place; once a rollback culls it,
    the step reports a new measurement of the model actually left."""
    env = make_env(max_epochs=14, governor=GovernorConfig(max_consecutive_rollbacks=5))
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "late", "conv_light"))
    while env.model.slot("late").stage is not SeedStage.BLENDING:
        env.step(Decision.wait())
    with torch.no_grad():  # a seed that changes the output a lot
        for p in env.model.slot("late").seed.parameters():
            p.add_(3.0 * torch.randn_like(p))
    healthy = env.step(Decision.wait()).signals
    for _ in range(2):  # the first rollback blames nobody; the second culls the suspect
        poison_seed_next_epoch(env, "late", monkeypatch)
        result = env.step(Decision.wait())
    assert [(s, c.target) for s, c in result.changes] == [("late", SeedStage.CULLED)]
    assert_signals_measure_the_model_left(env, result.signals)
    assert result.signals.val_loss != pytest.approx(healthy.val_loss)  # not the seed's measurement
    assert result.signals.slot("late").contribution is None


def test_a_diverging_host_never_blames_a_training_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seed in TRAINING cannot change the output, so host divergence never culls it."""
    env = make_env(max_epochs=10, governor=GovernorConfig(max_consecutive_rollbacks=5))
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    for _ in range(3):
        poison_next_epoch(env, monkeypatch)
        result = env.step(Decision.wait())
        assert result.panic is not None and result.changes == ()
    assert env.model.slot("mid").stage is SeedStage.TRAINING
    assert_consistent_and_trainable(env)


def test_events_report_the_undone_changes_only_in_the_rollback(monkeypatch: pytest.MonkeyPatch) -> None:
    events = []
    env = make_env(max_epochs=6)
    env.events.emit = events.append
    env.reset(0)
    poison_next_epoch(env, monkeypatch)
    env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_light"))
    assert [e.kind for e in events] == ["governor_rollback", "epoch"]
    undone = events[0].data["undone"]
    assert [(u["slot"], u["target"]) for u in undone] == [("early", "GERMINATED"), ("early", "TRAINING")]
    assert events[1].data["slots"][0]["stage"] == "DORMANT"


def test_an_exception_mid_step_leaves_nothing_half_done(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(max_epochs=6)
    env.reset(0)
    env.step(Decision.wait())
    before = {k: v.clone() for k, v in env.model.state_dict().items() if isinstance(v, torch.Tensor)}
    original = env.passes.measure

    def failing(model):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(env.passes, "measure", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_heavy"))
    monkeypatch.setattr(env.passes, "measure", original)
    assert env.clock.epoch == 1 and env.seeds.germinated == 0 and env.seeds.records == []
    assert env.model.slot("early").stage is SeedStage.DORMANT and "early" not in env.optimizers.seeds
    after = env.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    assert_consistent_and_trainable(env)


def test_a_panicked_step_reports_no_undone_transition_and_restores_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(max_epochs=8, max_germinations=1)
    env.reset(0)
    env.step(Decision.wait())
    poison_next_epoch(env, monkeypatch)
    result = env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_light"))
    assert result.panic is not None and result.changes == ()
    assert env.seeds.germinated == 0 and result.signals.seeds_germinated == 0  # the budget is not spent
    assert result.signals.epochs_since_germination == result.signals.epoch
    env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_light"))
    assert env.seeds.records[-1].seed_id == "seed-2"  # ids stay unique even across a rollback


def test_a_loss_blowup_without_nan_rolls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(max_epochs=8)
    env.reset(0)
    for _ in range(3):
        env.step(Decision.wait())
    reference = {k: v.clone() for k, v in env.model.state_dict().items() if isinstance(v, torch.Tensor)}
    original = env.train_batch

    def exploding(x, y):
        with torch.no_grad():
            env.model.host.segments[-1][-1].weight.mul_(1e4)  # huge but finite logits
        monkeypatch.setattr(env, "train_batch", original)
        return original(x, y)

    monkeypatch.setattr(env, "train_batch", exploding)
    result = env.step(Decision.wait())
    assert result.panic is not None and "blow-up" in result.panic
    restored = env.model.state_dict()
    assert all(torch.equal(restored[k], v) for k, v in reference.items())


def test_repeated_rollbacks_end_the_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(max_epochs=20, governor=GovernorConfig(max_consecutive_rollbacks=2))
    env.reset(0)
    poison_next_epoch(env, monkeypatch)
    first = env.step(Decision.wait())
    assert first.panic is not None and not first.done
    poison_next_epoch(env, monkeypatch)
    second = env.step(Decision.wait())
    assert second.done and "2 consecutive rollbacks" in second.panic
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(Decision.wait())


def test_end_episode_on_panic_ends_at_the_first_rollback(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(max_epochs=20, end_episode_on_panic=True)
    env.reset(0)
    env.step(Decision.wait())
    poison_next_epoch(env, monkeypatch)
    result = env.step(Decision.wait())
    assert result.panic is not None and result.done and env.episode_over
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(Decision.wait())
    env.reset(1)
    assert not env.episode_over


def test_an_exception_between_batches_is_undone_by_abort_step() -> None:
    env = make_env(max_epochs=6)
    env.reset(0)
    before = {k: v.clone() for k, v in env.model.state_dict().items() if isinstance(v, torch.Tensor)}
    env.begin_step(Decision(LifecycleOp.GERMINATE, "early", "conv_light"))
    x, y = next(env.passes.data.train_batches(env.config.task.batch_size, torch.Generator().manual_seed(0)))
    env.train_batch(x, y)
    env.abort_step()
    assert env.clock.epoch == 0 and env.seeds.germinated == 0 and env.model.slot("early").seed is None
    after = env.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    assert_consistent_and_trainable(env)


def test_a_step_undone_after_an_exception_counts_no_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    """A measurement that raises after the epoch's FLOPs were counted: retried, the epoch counts once."""
    clean, failing = make_env(max_epochs=6), make_env(max_epochs=6)
    for env in (clean, failing):
        env.reset(0)
    clean.step(Decision.wait())
    measure = failing.passes.measure
    monkeypatch.setattr(failing.passes, "measure", lambda model: (_ for _ in ()).throw(RuntimeError("device lost")))
    with pytest.raises(RuntimeError, match="device lost"):
        failing.step(Decision.wait())
    assert failing.clock.epoch == 0 and failing.compute.train_flops == 0
    monkeypatch.setattr(failing.passes, "measure", measure)
    failing.step(Decision.wait())
    assert failing.compute.tally() == clean.compute.tally()
    assert failing.compute.train_flops > 0
