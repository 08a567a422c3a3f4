"""A compute budget on germination (`GateThresholds.compute_budget`): its projection is an upper
bound, every controller reads its verdict, and the env refuses what it excludes."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_env, tiny_shapes_data, tiny_shapes_task, tiny_text_task, training_signals
from esper.kasmina import CNNHost, GateRefused, MorphogeneticModel, Topology, TransformerHost
from esper.leyline import (
    BlendSchedule,
    BudgetProjections,
    Decision,
    GateThresholds,
    LifecycleOp,
    SeedStage,
    SlotSignals,
    TrainingSignals,
)
from esper.scripts.cli import main
from esper.simic.cloning import demonstrate
from esper.simic.rewards import RewardConfig, RewardFunction
from esper.tamiyo import (
    ActionSpace,
    HeuristicConfig,
    HeuristicController,
    PolicySpaces,
    RandomController,
    StaticController,
    sample_factored,
)
from esper.tamiyo.baselines import NaiveGrowthController
from esper.tolaria import TASKS
from esper.tolaria.compute import projection_twins, training_flops_per_sample
from esper.tolaria.episode import run_episode
from test_heuristic import slot as heuristic_slot

SLOTS = ("early", "mid", "late")


def budgeted_env(budget: float | None, **kwargs):
    return make_env(thresholds=GateThresholds(compute_budget=budget), **kwargs)


def dormant(name: str, affordable: tuple[str, ...] | None) -> SlotSignals:
    return heuristic_slot(name, affordable_blueprints=affordable)


@pytest.mark.parametrize(
    ("host", "sample"),
    [
        (lambda: CNNHost(width=4, depth=3), (torch.zeros(1, 3, 16, 16), torch.zeros(1, dtype=torch.long))),
        (
            lambda: TransformerHost(block_size=8, d_model=16, n_layer=3, n_slots=3),
            (torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long)),
        ),
    ],
    ids=["cnn", "transformer"],
)
def test_no_seed_costs_more_in_training_or_blending_than_at_alpha_1(host, sample) -> None:
    """The projection's premise: a seed's training epoch is dearest at alpha 1."""
    torch.manual_seed(0)
    model = MorphogeneticModel(host())
    for name in SLOTS:
        slot = model.slot(name)
        for blueprint in slot.accepted_blueprints():
            torch.manual_seed(0)
            slot.germinate(blueprint, "s", BlendSchedule.LINEAR)
            costs = {}
            for stage in (SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY):
                slot.lifecycle.stage = stage
                costs[stage] = training_flops_per_sample(model, sample)
            assert costs[SeedStage.TRAINING] <= costs[SeedStage.PROBATIONARY], (name, blueprint, costs)
            assert costs[SeedStage.BLENDING] <= costs[SeedStage.PROBATIONARY], (name, blueprint, costs)
            slot.cull()
            slot.lifecycle.stage = SeedStage.DORMANT


@pytest.mark.parametrize("merge_order", [("early", "mid"), ("mid", "early")])
def test_two_merged_width_seeds_cost_no_more_than_projected(merge_order: tuple[str, str]) -> None:
    """`mid`'s width seed, grown while `early`'s is live, reads only the host's channels; merged,
    it reads `early`'s too, as zero weights: dearer than both blended, which the projection
    must cover."""
    sample = (torch.zeros(1, 3, 16, 16), torch.zeros(1, dtype=torch.long))
    torch.manual_seed(0)
    model = MorphogeneticModel(CNNHost(width=8, depth=3))
    model.slot("early").germinate("widen_50", "a", BlendSchedule.LINEAR)
    model.slot("early").lifecycle.stage = SeedStage.PROBATIONARY
    twins = projection_twins(model, "mid", "widen_50")
    projected = max(training_flops_per_sample(twin, sample) for twin in twins)
    model.slot("mid").germinate("widen_50", "b", BlendSchedule.LINEAR)
    for name in merge_order:
        model.slot(name).lifecycle.stage = SeedStage.FOSSILIZED
        model.merge_width_seed(name)
    merged = training_flops_per_sample(model, sample)
    assert merged <= projected
    assert merged > training_flops_per_sample(twins[0], sample)  # blending alone would not cover it


def test_an_epochs_sample_count_is_what_its_batches_hold() -> None:
    images = tiny_shapes_data()
    for data, batch_size in ((images, 50), (images, 64), (images.with_samples_per_epoch(130), 50)):
        drawn = sum(x.shape[0] for x, _ in data.train_batches(batch_size, torch.Generator().manual_seed(0)))
        assert data.epoch_sample_count(batch_size) == drawn
    tokens = tiny_text_task().load_data(None)
    drawn = sum(x.shape[0] for x, _ in tokens.train_batches(24, torch.Generator().manual_seed(0)))
    assert tokens.epoch_sample_count(24) == drawn


def test_a_static_run_spends_exactly_one_start_host_run() -> None:
    env = budgeted_env(None)
    run_episode(env, StaticController(), rng_seed=0, episode=0)
    assert env.compute.train_share == pytest.approx(1.0, abs=1e-12)
    assert env.compute.extra_train_share == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=6, deadline=None)
@given(budget=st.floats(1.0, 2.5), rng_seed=st.integers(0, 1000))
def test_a_run_under_a_budget_ends_within_it(budget: float, rng_seed: int) -> None:
    """Whatever a controller grows (here at random, under the masks), the run ends in budget."""
    env = budgeted_env(budget, max_epochs=5)
    blueprints = ("conv_heavy", "widen_50", "widen_100", "norm")
    controller = RandomController(Topology.CNN, SLOTS, blueprints, env.config.thresholds, rng_seed=rng_seed)
    run_episode(env, controller, rng_seed=rng_seed, episode=0)
    assert env.compute.train_share <= budget + 1e-12


def test_the_env_refuses_a_germination_over_budget_and_changes_nothing() -> None:
    env = budgeted_env(1.0)
    signals = env.reset(0)
    assert "conv_heavy" not in signals.slot("early").affordable_blueprints
    assert "norm" in signals.slot("early").affordable_blueprints  # element-wise work is not counted
    with pytest.raises(GateRefused, match=r"G0: conv_heavy in early would take the run to 1\.\d+ .*budget of 1\.0"):
        env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_heavy"))
    assert env.clock.epoch == 0 and env.model.slot("early").seed is None


def test_without_a_budget_every_blueprint_is_affordable() -> None:
    signals = budgeted_env(None).reset(0)
    assert all(s.affordable_blueprints is None and s.affords("widen_100") for s in signals.slots)


def test_a_budgeted_seed_waits_until_it_fits() -> None:
    """A width seed too dear at epoch 0 fits later, as the epochs left to pay for shrink."""
    env = budgeted_env(1.2, max_epochs=6)
    naive = NaiveGrowthController(Topology.CNN, {"early": ("widen_100", 0)}, env.config.thresholds)
    outcome = run_episode(env, naive, rng_seed=0, episode=0)
    germinated_at = [epoch for r in outcome.records for epoch, stage in r.stage_history if stage == "GERMINATED"]
    assert germinated_at and germinated_at[0] > 1
    assert env.compute.train_share <= 1.2


def test_the_masks_offer_in_each_slot_the_blueprints_that_fit_there() -> None:
    slots = (dormant("early", ("norm", "conv_heavy")), dormant("mid", ("norm",)), dormant("late", ()))
    signals = training_signals(slots)
    space = ActionSpace(Topology.CNN, SLOTS, ("norm", "conv_heavy"))
    _, (slot_table, blueprint_table, _) = space.conditional_masks(signals, GateThresholds())
    assert slot_table[LifecycleOp.GERMINATE].tolist() == [True, True, False]
    fits = {
        name: {
            b for b, ok in zip(space.blueprints, blueprint_table[LifecycleOp.GERMINATE, i].tolist(), strict=True) if ok
        }
        for i, name in enumerate(SLOTS[:2])
    }
    assert fits == {"early": {"norm", "conv_heavy"}, "mid": {"norm"}}
    sampled = set()
    for k in range(200):  # whatever is sampled is executable in its slot
        sample = sample_factored(
            [torch.zeros(1, n) for n in space.head_sizes],
            space.masks(signals, GateThresholds()),
            generator=torch.Generator().manual_seed(k),
        )
        decision = space.decode(*sample.actions[0].tolist())
        if decision.op is LifecycleOp.GERMINATE:
            assert signals.slot(decision.slot).affords(decision.blueprint), decision
            sampled.add((decision.slot, decision.blueprint))
    assert sampled == {("early", "norm"), ("early", "conv_heavy"), ("mid", "norm")}


def test_a_teacher_growing_what_fits_in_its_slot_can_be_cloned() -> None:
    """At budget 1.25 this host's `early` takes widen_25 from epoch 0 but widen_50 only from
    epoch 3: the masks allow what the env allows, so the warm start can learn a germination at
    epoch 0 by a policy that may also pick widen_50."""
    env = budgeted_env(1.25, max_epochs=6)
    spaces = PolicySpaces.derive(Topology.CNN, SLOTS, ("widen_50", "widen_25"))
    teacher = NaiveGrowthController(Topology.CNN, {"early": ("widen_25", 0)}, env.config.thresholds)
    demo = demonstrate(env, teacher, spaces, RewardFunction(RewardConfig(), 1.0), rng_seed=0, episode=0)
    assert tuple(demo.actions[0].tolist()[:3]) == (
        int(LifecycleOp.GERMINATE),
        0,
        spaces.actions.blueprints.index("widen_25"),
    )
    blueprint_mask = demo.masks[0][len(LifecycleOp) + len(SLOTS) :][: len(spaces.actions.blueprints)]
    fits = {b for b, ok in zip(spaces.actions.blueprints, blueprint_mask.tolist(), strict=True) if ok}
    assert fits == {"widen_25"}  # widen_50 does not fit `early` yet: masked in that slot alone


def test_the_heuristic_skips_a_slot_whose_blueprint_does_not_fit() -> None:
    config = HeuristicConfig(warmup_epochs=0, blueprint_order=("conv_heavy",))
    heuristic = HeuristicController(Topology.CNN, SLOTS, config=config)
    slots = (dormant("early", ("norm",)), dormant("mid", ("conv_heavy",)), dormant("late", ("conv_heavy",)))
    decision = heuristic.decide(training_signals(slots))
    assert (decision.op, decision.slot, decision.blueprint) == (LifecycleOp.GERMINATE, "mid", "conv_heavy")
    nothing_fits = tuple(dormant(name, ()) for name in SLOTS)
    assert heuristic.decide(training_signals(nothing_fits)).op is LifecycleOp.WAIT


def test_a_run_as_it_stands_projects_to_one_start_host_run() -> None:
    projections = budgeted_env(1.5).reset(0).budget_projections
    assert projections.standing == pytest.approx(1.0, abs=1e-12)
    assert projections.per_slot["early"]["widen_50"] > 1.0
    assert projections.affordable()["early"] == budgeted_env(1.5).reset(0).slot("early").affordable_blueprints


def plan_signals(early: float, mid: float) -> TrainingSignals:
    """Two empty slots whose widen_50 alone ends the run at `early` and `mid` start-host runs,
    against a budget of 1.5 and a run that ends at 1.0 as it stands."""
    per_slot = {"early": {"widen_50": early}, "mid": {"widen_50": mid}, "late": {}}
    affordable = {name: tuple(b for b, s in by_bp.items() if s <= 1.5) for name, by_bp in per_slot.items()}
    slots = tuple(dormant(name, affordable[name]) for name in SLOTS)
    return training_signals(slots, budget_projections=BudgetProjections(1.5, 1.0, per_slot))


@pytest.mark.parametrize(("early", "mid", "grows"), [(1.3, 1.3, False), (1.15, 1.3, True), (1.15, 1.6, False)])
def test_growing_together_waits_until_every_planned_seed_fits_beside_the_others(early, mid, grows) -> None:
    """Each seed alone fits at 1.3, but the two add 0.3 + 0.3 to the run's 1.0: over 1.5. A plan
    whose `mid` does not fit yet waits for it."""
    config = HeuristicConfig(warmup_epochs=0, blueprint_order=("widen_50",), slots=("early", "mid"))
    alone = HeuristicController(Topology.CNN, SLOTS, config=config).decide(plan_signals(early, mid))
    together = dataclasses.replace(config, grow_together=True)
    decision = HeuristicController(Topology.CNN, SLOTS, config=together).decide(plan_signals(early, mid))
    assert (decision.op, decision.slot) == ((LifecycleOp.GERMINATE, "early") if grows else (LifecycleOp.WAIT, None))
    assert alone.op is (LifecycleOp.GERMINATE if early <= 1.5 else LifecycleOp.WAIT)


def test_a_plan_skips_slots_that_refuse_its_blueprint_and_seeds_it_cannot_germinate() -> None:
    """`late` accepts no widen_50 here, and one germination is left: the plan is `early` alone."""
    signals = plan_signals(1.3, 1.3)
    per_slot = {"early": {"widen_50": 1.3}, "mid": {"widen_50": 1.3}, "late": {"norm": 1.0}}
    projections = BudgetProjections(1.5, 1.0, per_slot)
    config = HeuristicConfig(warmup_epochs=0, blueprint_order=("widen_50",), grow_together=True)
    heuristic = HeuristicController(Topology.CNN, SLOTS, config=config)
    two_left = dataclasses.replace(signals, budget_projections=projections, max_germinations=2)
    assert heuristic.decide(two_left).op is LifecycleOp.WAIT  # early and mid: 1.6 together
    one_left = dataclasses.replace(two_left, seeds_germinated=1)
    assert (heuristic.decide(one_left).op, heuristic.decide(one_left).slot) == (LifecycleOp.GERMINATE, "early")


def test_the_run_as_it_stands_includes_a_live_seed_at_its_projected_cost() -> None:
    env = budgeted_env(2.0)
    before = env.reset(0).budget_projections.per_slot["early"]["widen_50"]
    env.step(Decision(LifecycleOp.GERMINATE, "early", "widen_50"))
    after = env.step(Decision.wait()).signals.budget_projections
    assert 1.0 < after.standing <= before + 1e-12


def test_grown_together_the_second_seed_follows_the_first_within_the_budget() -> None:
    """Grown as each fits, `early` takes the budget's room at once and `mid` waits; grown
    together, both wait for the epoch at which the pair fits, and the run ends within it."""
    knobs = {"warmup_epochs": 0, "plateau_patience": 0, "germination_cooldown": 1, "blueprint_order": ["widen_50"]}
    epochs = {}
    for together in (False, True):
        env = budgeted_env(1.5, max_epochs=10)
        config = HeuristicConfig().with_knobs({**knobs, "slots": ["early", "mid"], "grow_together": together})
        outcome = run_episode(
            env, HeuristicController(Topology.CNN, SLOTS, config=config, thresholds=env.config.thresholds), 0, 0
        )
        epochs[together] = {r.slot: r.stage_history[0][0] for r in outcome.records}
        assert env.compute.train_share <= 1.5
    assert epochs[False]["early"] < epochs[True]["early"]
    assert epochs[True]["mid"] - epochs[True]["early"] < epochs[False]["mid"] - epochs[False]["early"]


def test_a_budget_below_one_start_host_run_is_one_line_exit_2(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    run_dir = tmp_path / "run"
    rc = main(["heuristic", "--quiet", "--max-epochs", "1", "--run-dir", str(run_dir), "--gates.compute_budget", "0.9"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "compute_budget must be >= 1" in err and "0.9" in err
    assert not run_dir.exists()


def test_thresholds_refuse_a_budget_below_one() -> None:
    with pytest.raises(ValueError, match="compute_budget must be >= 1"):
        GateThresholds(compute_budget=0.5)
    assert dataclasses.replace(GateThresholds(), compute_budget=1.0).compute_budget == 1.0
