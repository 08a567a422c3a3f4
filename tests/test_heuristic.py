"""The heuristic controller: multi-slot germination, fossilize/cull rules, blueprint rotation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import make_env, training_signals
from esper.kasmina import Topology
from esper.kasmina.lifecycle import StageChange
from esper.leyline import BlendSchedule, Decision, GateThresholds, LifecycleOp, SeedStage, SlotSignals, TrainingSignals
from esper.runs.common import UsageError, check_same_run
from esper.tamiyo import PREFERRED_BLUEPRINTS, HeuristicConfig, HeuristicController
from esper.tolaria.episode import run_episode

SLOTS = ("early", "mid", "late")


def slot(name: str, stage: SeedStage = SeedStage.DORMANT, contribution: float | None = None, **kw) -> SlotSignals:
    has = stage not in (SeedStage.DORMANT, SeedStage.EMBARGOED, SeedStage.RESETTING, SeedStage.CULLED)
    fields = dict(
        name=name,
        index=SLOTS.index(name),
        enabled=True,
        stage=stage,
        epochs_in_stage=1,
        alpha=0.0,
        blueprint="conv_light" if has else None,
        seed_id=f"s-{name}" if has else None,
        contribution=contribution,
        grad_norm=1.0 if has else None,
        param_count=10 if has else 0,
    )
    fields.update(kw)
    return SlotSignals(**fields)


def signals(slots, epoch=5, plateau=3, germinated=0, since=10, max_germinations=6) -> TrainingSignals:
    return training_signals(
        slots,
        epoch=epoch,
        plateau_epochs=plateau,
        seeds_germinated=germinated,
        epochs_since_germination=since,
        max_germinations=max_germinations,
    )


def germinated(decision: Decision) -> list[tuple[str, StageChange]]:
    """The changes an env reports when it executes a GERMINATE decision."""
    return [(decision.slot, StageChange(SeedStage.DORMANT, SeedStage.GERMINATED, "G0"))]


def decide_and_execute(c: HeuristicController, s: TrainingSignals) -> Decision:
    d = c.decide(s)
    c.record_step(d, germinated(d) if d.op is LifecycleOp.GERMINATE else [])
    return d


def controller(**kw) -> HeuristicController:
    return HeuristicController(Topology.CNN, SLOTS, config=HeuristicConfig(**kw))


def test_germinates_into_first_empty_enabled_slot_in_host_order() -> None:
    c = controller()
    d = decide_and_execute(c, signals([slot("early"), slot("mid"), slot("late")]))
    assert (d.op, d.slot, d.blueprint) == (LifecycleOp.GERMINATE, "early", "conv_heavy")
    d = decide_and_execute(c, signals([slot("early", SeedStage.TRAINING), slot("mid"), slot("late")]))
    assert (d.op, d.slot, d.blueprint) == (LifecycleOp.GERMINATE, "mid", "conv_heavy")  # its own rotation
    d = c.decide(signals([slot("early", SeedStage.EMBARGOED), slot("mid", SeedStage.FOSSILIZED), slot("late")]))
    assert d.slot == "late"
    disabled = dataclasses.replace(slot("early"), enabled=False)
    assert c.decide(signals([disabled, slot("mid"), slot("late")])).slot == "mid"


def test_a_slots_knob_narrows_where_it_germinates_and_nothing_else() -> None:
    """`slots` narrows this heuristic's germinations; it still judges seeds in every slot."""
    c = controller(slots=("mid",))
    assert decide_and_execute(c, signals([slot(n) for n in SLOTS])).slot == "mid"
    busy = [slot("early"), slot("mid", SeedStage.TRAINING), slot("late")]
    assert c.decide(signals(busy)).op is LifecycleOp.WAIT
    harmful = [slot("early", SeedStage.PROBATIONARY, contribution=-2.0), slot("mid", SeedStage.TRAINING), slot("late")]
    assert (c.decide(signals(harmful)).op, c.decide(signals(harmful)).slot) == (LifecycleOp.CULL, "early")
    assert HeuristicConfig().with_knobs({"slots": ["early", "mid"]}).slots == ("early", "mid")


def test_a_run_recorded_before_the_slots_grow_together_and_slot_blueprints_knobs_resumes(
    tmp_path: Path,
) -> None:
    """... and one recorded with them set does not."""
    today = {"warmup_epochs": 2, "slots": [], "grow_together": False, "slot_blueprints": []}
    config = {"settings": {"task": "shapes"}, "knobs": {"heuristic": today}}
    before = {"settings": {"task": "shapes"}, "knobs": {"heuristic": {"warmup_epochs": 2}}}
    (tmp_path / "config.json").write_text(json.dumps(before))
    assert check_same_run(tmp_path, config, frozenset())
    narrowed = {**config, "knobs": {"heuristic": {**today, "slots": ["mid"]}}}
    with pytest.raises(UsageError, match=r"heuristic.slots: \[\] -> \['mid'\]"):
        check_same_run(tmp_path, narrowed, frozenset())
    together = {**config, "knobs": {"heuristic": {**today, "grow_together": True}}}
    with pytest.raises(UsageError, match=r"heuristic.grow_together: False -> True"):
        check_same_run(tmp_path, together, frozenset())
    pinned = {**config, "knobs": {"heuristic": {**today, "slot_blueprints": ["early=widen_50"]}}}
    with pytest.raises(UsageError, match=r"heuristic.slot_blueprints: \[\] -> \['early=widen_50'\]"):
        check_same_run(tmp_path, pinned, frozenset())


def test_respects_warmup_plateau_cooldown_and_budget() -> None:
    c = controller(warmup_epochs=3, plateau_patience=2, germination_cooldown=3)
    empty = [slot(n) for n in SLOTS]
    assert c.decide(signals(empty, epoch=2)).op is LifecycleOp.WAIT
    assert c.decide(signals(empty, plateau=1)).op is LifecycleOp.WAIT
    assert c.decide(signals(empty, since=2)).op is LifecycleOp.WAIT
    assert c.decide(signals(empty, germinated=6, max_germinations=6)).op is LifecycleOp.WAIT
    assert c.decide(signals(empty, max_germinations=0)).op is LifecycleOp.WAIT
    # 25-epoch episode: a seed germinated after epoch 17 could not be fossilized before the end
    assert c.decide(signals(empty, epoch=18)).op is LifecycleOp.WAIT
    assert c.decide(signals(empty, epoch=17)).op is LifecycleOp.GERMINATE
    assert c.decide(signals(empty)).op is LifecycleOp.GERMINATE


def test_fossilizes_a_contributing_seed_and_culls_a_harmful_one() -> None:
    c = controller(fossilize_threshold=0.5, cull_threshold=-0.5)
    d = c.decide(
        signals([slot("early", SeedStage.PROBATIONARY, 0.2), slot("mid", SeedStage.PROBATIONARY, 2.0), slot("late")])
    )
    assert (d.op, d.slot) == (LifecycleOp.FOSSILIZE, "mid")
    d = c.decide(signals([slot("early", SeedStage.PROBATIONARY, -1.0), slot("mid"), slot("late")], plateau=0))
    assert (d.op, d.slot) == (LifecycleOp.CULL, "early")
    # a seed still blending in is given time: only a large dip culls it
    d = c.decide(signals([slot("early", SeedStage.BLENDING, -1.0), slot("mid"), slot("late")], plateau=0))
    assert d.op is LifecycleOp.WAIT
    d = c.decide(signals([slot("early", SeedStage.BLENDING, -4.0), slot("mid"), slot("late")], plateau=0))
    assert (d.op, d.slot) == (LifecycleOp.CULL, "early")
    d = c.decide(
        signals([slot("early", SeedStage.TRAINING, grad_norm=float("inf")), slot("mid"), slot("late")], plateau=0)
    )
    assert (d.op, d.slot) == (LifecycleOp.CULL, "early")


def test_decide_has_no_side_effects() -> None:
    c = controller()
    empty = signals([slot(n) for n in SLOTS])
    assert len({repr(c.decide(empty)) for _ in range(5)}) == 1
    c.record_step(c.decide(empty), [])  # refused or rolled back: nothing was germinated
    assert c.decide(empty).blueprint == c.rotation[0]


def test_each_slot_rotates_through_the_blueprints() -> None:
    c = controller()
    empty = [slot(n) for n in SLOTS]
    assert [decide_and_execute(c, signals(empty)).blueprint for _ in c.rotation] == list(c.rotation)
    occupied_early = [slot("early", SeedStage.FOSSILIZED), slot("mid"), slot("late")]
    assert c.decide(signals(occupied_early)).blueprint == c.rotation[0]


def test_culled_blueprints_are_penalised_in_rotation() -> None:
    c = controller()
    empty = [slot(n) for n in SLOTS]
    decide_and_execute(c, signals(empty))
    c.record_step(Decision.wait(), [("early", StageChange(SeedStage.BLENDING, SeedStage.CULLED, "harmful"))])
    assert c.penalty["conv_heavy"] > 0
    choices = [decide_and_execute(c, signals(empty)).blueprint for _ in range(2 * len(c.rotation))]
    assert "conv_heavy" not in choices[:3]  # penalised while every other blueprint is clean
    for _ in range(40):  # penalties decay every epoch; the blueprint comes back into rotation
        c.record_step(Decision.wait(), [])
    assert "conv_heavy" in [decide_and_execute(c, signals(empty)).blueprint for _ in c.rotation]


def test_fossilize_respects_the_env_gate_thresholds() -> None:
    strict = GateThresholds(min_probation_epochs=3, fossilize_min_contribution=2.0)
    c = HeuristicController(Topology.CNN, SLOTS, thresholds=strict)
    probation = slot("early", SeedStage.PROBATIONARY, 1.5, epochs_in_stage=3)
    assert c.decide(signals([probation, slot("mid"), slot("late")], plateau=0)).op is LifecycleOp.WAIT
    early = dataclasses.replace(probation, contribution=2.5, epochs_in_stage=2)
    assert c.decide(signals([early, slot("mid"), slot("late")], plateau=0)).op is LifecycleOp.WAIT
    ready = dataclasses.replace(probation, contribution=2.5)
    assert c.decide(signals([ready, slot("mid"), slot("late")], plateau=0)).op is LifecycleOp.FOSSILIZE
    assert c.epochs_to_judge("conv_light") == strict.min_training_epochs + strict.blend_epochs + 3 + 1


def test_a_seed_germinated_at_the_horizon_can_still_be_fossilized() -> None:
    """Simulate the lifecycle step by step: the last germination the heuristic allows reaches a
    FOSSILIZE decision on the episode's final step."""
    env = make_env(
        max_epochs=8, thresholds=GateThresholds(fossilize_min_contribution=-100.0, probation_cull_contribution=-100.0)
    )
    c = HeuristicController(
        Topology.CNN, SLOTS, thresholds=env.config.thresholds, config=HeuristicConfig(fossilize_threshold=-100.0)
    )
    env.reset(0)
    assert env.config.max_epochs - c.epochs_to_judge("conv_light") == 0  # germinate at epoch 0, the horizon
    env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_light"))
    decisions = []
    done = False
    while not done:
        d = c.decide(env.signals)
        decisions.append(d.op)
        result = env.step(d)
        done = result.done
    assert decisions[-1] is LifecycleOp.FOSSILIZE
    assert env.model.slot("early").stage is SeedStage.FOSSILIZED


def test_heuristic_fills_more_than_one_slot_end_to_end() -> None:
    env = make_env(max_epochs=12)
    c = HeuristicController(
        Topology.CNN, SLOTS, config=HeuristicConfig(warmup_epochs=1, plateau_patience=0, germination_cooldown=1)
    )
    outcome = run_episode(env, c, rng_seed=0, episode=0)
    assert len({r.slot for r in outcome.records}) >= 2
    assert len({r.seed_id for r in outcome.records}) == len(outcome.records)  # ids unique per env


def test_the_blueprint_order_knob_sets_each_slots_rotation() -> None:
    c = controller(blueprint_order=("norm", "depthwise"))
    first = decide_and_execute(c, signals([slot(n) for n in SLOTS]))
    assert first.blueprint == "norm"


def test_a_width_blueprint_the_order_names_is_germinated_without_blueprints() -> None:
    """Knobs that name a width blueprint chose it: grow, eval and the ppo warm start (no
    `--blueprints`) dropped it, and ran only the order's residual blueprints."""
    c = controller(blueprint_order=("widen_25", "conv_heavy"))
    assert c.rotation == ("widen_25", "conv_heavy")
    assert decide_and_execute(c, signals([slot(n) for n in SLOTS])).blueprint == "widen_25"
    narrowed = HeuristicController(Topology.CNN, SLOTS, ["conv_heavy"], HeuristicConfig(blueprint_order=("widen_25",)))
    assert narrowed.rotation == ("conv_heavy",)  # `--blueprints` still narrows the order
    assert controller().rotation == PREFERRED_BLUEPRINTS[Topology.CNN]  # no width unless named


def test_the_tuned_knobs_of_a_task_are_its_heuristic_defaults(monkeypatch, tmp_path, workdir) -> None:
    """A task's tuned file is the layer under config files and flags, in every command."""
    from conftest import tiny_shapes_task
    from esper.scripts.cli import main
    from esper.tamiyo import heuristic
    from esper.tolaria import TASKS

    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    monkeypatch.setattr(heuristic, "TUNED_DIR", tmp_path)
    tuned = {"heuristic": {"warmup_epochs": 7, "schedule": "SIGMOID", "blueprint_order": ["norm", "conv_light"]}}
    (tmp_path / "shapes.json").write_text(json.dumps(tuned))
    assert heuristic.tuned_heuristic("shapes") == HeuristicConfig(
        warmup_epochs=7, schedule=BlendSchedule.SIGMOID, blueprint_order=("norm", "conv_light")
    )
    assert heuristic.tuned_heuristic("pydoc") == HeuristicConfig()
    argv = ["heuristic", "--max-epochs", "1", "--quiet"]
    assert main([*argv, "--run-dir", "tuned"]) == 0
    assert main([*argv, "--heuristic.warmup_epochs", "3", "--run-dir", "flagged"]) == 0
    knobs = json.loads(Path("tuned/config.json").read_text())["knobs"]["heuristic"]
    assert (knobs["warmup_epochs"], knobs["schedule"], knobs["blueprint_order"]) == (
        7,
        "SIGMOID",
        ["norm", "conv_light"],
    )
    assert json.loads(Path("flagged/config.json").read_text())["knobs"]["heuristic"]["warmup_epochs"] == 3
    (tmp_path / "shapes.json").write_text(json.dumps({"heuristic": {"warmup": 1}}))
    with pytest.raises(ValueError, match="unknown heuristic knob 'warmup'"):
        heuristic.tuned_heuristic_knobs("shapes")


def test_a_width_seed_is_germinated_as_late_as_its_own_shorter_dwell_allows() -> None:
    """A width seed dwells 1 + 1 epochs (the width thresholds), a residual one 3 + 3: near the
    end of an episode the heuristic still germinates a width seed it can judge in time, where it
    would wait with a residual one. (It used the residual dwell for both.)"""
    t = GateThresholds()
    width = HeuristicController(Topology.CNN, SLOTS, blueprints=["widen_25"], thresholds=t)
    residual = HeuristicController(Topology.CNN, SLOTS, blueprints=["conv_light"], thresholds=t)
    assert width.epochs_to_judge("widen_25") == t.width_training_epochs + t.width_blend_epochs + 1 + 1 == 4
    assert residual.epochs_to_judge("conv_light") == 8
    late = dataclasses.replace(signals([slot("early"), slot("mid"), slot("late")], epoch=36), max_epochs=40)
    chosen = width.decide(late)
    assert (chosen.op, chosen.slot, chosen.blueprint) == (LifecycleOp.GERMINATE, "early", "widen_25")
    assert residual.decide(late).op is LifecycleOp.WAIT
    too_late = dataclasses.replace(late, epoch=37)
    assert width.decide(too_late).op is LifecycleOp.WAIT


def test_slot_blueprints_pin_a_blueprint_to_a_slot_and_leave_the_others_rotating() -> None:
    c = controller(blueprint_order=("conv_light",), slot_blueprints=("early=widen_50", "late=widen_25"))
    d = decide_and_execute(c, signals([slot(n) for n in SLOTS]))
    assert (d.slot, d.blueprint) == ("early", "widen_50")
    d = decide_and_execute(c, signals([slot("early", SeedStage.TRAINING), slot("mid"), slot("late")]))
    assert (d.slot, d.blueprint) == ("mid", "conv_light")
    busy = [slot("early", SeedStage.TRAINING), slot("mid", SeedStage.TRAINING), slot("late")]
    d = decide_and_execute(c, signals(busy))
    assert (d.slot, d.blueprint) == ("late", "widen_25")
    culled = ("early", StageChange(SeedStage.TRAINING, SeedStage.CULLED, "G0"))
    c.record_step(Decision(LifecycleOp.CULL, "early"), [culled])
    d = c.decide(signals([slot("early"), slot("mid", SeedStage.TRAINING), slot("late", SeedStage.TRAINING)]))
    assert (d.slot, d.blueprint) == ("early", "widen_50")  # a cull does not move a pinned slot


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["early"], "'early' is not SLOT=BLUEPRINT"),
        (["early=widen_50", "early=widen_25"], "'early=widen_25' is not SLOT=BLUEPRINT"),
        (["=widen_50"], "'=widen_50' is not SLOT=BLUEPRINT"),
        (["late=widen_25"], "'late' is not among the heuristic's slots: early mid"),
    ],
)
def test_a_malformed_slot_blueprints_knob_is_an_error_naming_the_pair(pairs: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HeuristicConfig().with_knobs({"slots": ["early", "mid"], "slot_blueprints": pairs})


def test_a_pinned_blueprint_outside_the_runs_blueprints_is_refused() -> None:
    config = HeuristicConfig(slot_blueprints=("early=widen_50",))
    with pytest.raises(ValueError, match="not among the run's blueprints: conv_heavy"):
        HeuristicController(Topology.CNN, SLOTS, ("conv_heavy",), config)
