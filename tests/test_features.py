"""The observation layout and the running normalizer."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_env
from esper.kasmina import Topology
from esper.leyline import Decision, GateThresholds, LifecycleOp, SeedStage
from esper.simic import RunningMeanStd
from esper.tamiyo import GLOBAL_FEATURES, ObservationLayout, PolicySpaces

LAYOUT = ObservationLayout(Topology.CNN, ("early", "mid", "late"))


def test_layout_is_fixed_size_and_named() -> None:
    names = LAYOUT.feature_names()
    assert len(names) == LAYOUT.obs_dim == len(GLOBAL_FEATURES) + 3 * len(LAYOUT.slot_features)
    assert len(set(names)) == len(names)
    assert names[LAYOUT.slot_slice("mid")][0] == "mid.present"


def test_each_slot_block_belongs_to_its_slot_and_empty_slots_are_zero() -> None:
    env = make_env(max_epochs=10)
    env.reset(0)
    obs = LAYOUT.featurize(env.signals)
    for name in ("early", "mid", "late"):
        assert torch.count_nonzero(obs[LAYOUT.slot_slice(name)]) == 0
    env.step(Decision(LifecycleOp.GERMINATE, "late", "conv_heavy"))
    while env.model.slot("late").stage is not SeedStage.BLENDING:
        env.step(Decision.wait())
    obs = LAYOUT.featurize(env.signals)
    late = dict(zip(LAYOUT.slot_features, obs[LAYOUT.slot_slice("late")].tolist(), strict=True))
    assert late["present"] == 1.0 and late["stage_blending"] == 1.0 and late["blueprint_conv_heavy"] == 1.0
    assert late["alpha"] == pytest.approx(env.model.slot("late").alpha)
    assert late["param_share"] == pytest.approx(env.model.slot("late").param_count() / env.model.host_param_count())
    for name in ("early", "mid"):  # not the first active seed's data copied everywhere
        assert torch.count_nonzero(obs[LAYOUT.slot_slice(name)]) == 0
    assert torch.isfinite(obs).all()


def test_contribution_and_gradient_features_come_from_the_slot() -> None:
    env = make_env(max_epochs=12)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    while env.model.slot("mid").stage is not SeedStage.PROBATIONARY:
        env.step(Decision.wait())
    signals = env.signals
    other = dataclasses.replace(signals.slot("mid"), contribution=3.0, grad_norm=float("inf"))
    changed = dataclasses.replace(signals, slots=(signals.slots[0], other, signals.slots[2]))
    a, b = LAYOUT.featurize(signals), LAYOUT.featurize(changed)
    mid = dict(zip(LAYOUT.slot_features, b[LAYOUT.slot_slice("mid")].tolist(), strict=True))
    assert mid["contribution_measured"] == 1.0 and mid["grad_exploding"] == 1.0 and mid["grad_norm_log"] == 0.0
    assert torch.equal(a[: LAYOUT.slot_slice("mid").start], b[: LAYOUT.slot_slice("mid").start])
    assert torch.isfinite(b).all()


def test_mismatched_slots_are_refused() -> None:
    env = make_env()
    env.reset(0)
    with pytest.raises(ValueError, match="layout has"):
        ObservationLayout(Topology.CNN, ("early", "mid")).featurize(env.signals)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=6), st.integers(0, 1000))
def test_running_stats_equal_the_batch_stats_for_any_split(sizes, seed) -> None:
    g = torch.Generator().manual_seed(seed)
    batches = [torch.randn(n, 4, generator=g, dtype=torch.float64) * 3 + 1 for n in sizes]
    rms = RunningMeanStd(4)
    for b in batches:
        rms.update(b)
    everything = torch.cat(batches)
    torch.testing.assert_close(rms.mean, everything.mean(0))
    torch.testing.assert_close(rms.var, everything.var(0, unbiased=False))
    assert rms.count == everything.shape[0]


def test_normalizer_round_trips_and_checks_shape() -> None:
    rms = RunningMeanStd(3)
    rms.update(torch.randn(50, 3) * 5)
    fresh = RunningMeanStd(3)
    fresh.load_state_dict(rms.state_dict())
    x = torch.randn(4, 3)
    torch.testing.assert_close(fresh.normalize(x), rms.normalize(x))
    assert rms.normalize(torch.full((1, 3), 1e9)).max().item() == rms.clip
    with pytest.raises(ValueError, match="expected 5"):
        RunningMeanStd(5).load_state_dict(rms.state_dict())


def test_a_policy_allowed_width_blueprints_sees_them_and_can_choose_them() -> None:
    """Width blueprints a run allows join the blueprint head and the observation's one-hot after
    the residual ones; without them the layout is every earlier policy's (the shipped one's)."""
    plain = PolicySpaces.derive(Topology.CNN, ("early", "mid", "late"))
    wide = PolicySpaces.derive(Topology.CNN, ("early", "mid", "late"), ["conv_light", "widen_25"])
    assert plain.layout == LAYOUT and "mid.blueprint_widen_25" not in plain.layout.feature_names()
    assert wide.actions.blueprints[-1] == "widen_25" and wide.layout.blueprints == wide.actions.blueprints
    env = make_env(max_epochs=6)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "widen_25"))
    block = wide.layout.featurize(env.signals)[wide.layout.slot_slice("mid")].tolist()
    mid = dict(zip(wide.layout.slot_features, block, strict=True))
    assert mid["present"] == 1.0 and mid["blueprint_widen_25"] == 1.0
    assert sum(v for k, v in mid.items() if k.startswith("blueprint_")) == 1.0
    allowed = dict(zip(wide.actions.blueprints, wide.actions.blueprint_mask().tolist(), strict=True))
    assert allowed == {b: b in ("conv_light", "widen_25") for b in wide.actions.blueprints}


@pytest.mark.parametrize("budget", [None, 1.3])
def test_the_budget_block_shows_the_share_spent_and_what_fits_where(budget: float | None) -> None:
    """With `observe_budget` the observation ends with the budget's share spent and, per slot and
    blueprint, whether a germination fits now: the env's own verdict; no budget, every empty slot."""
    spaces = PolicySpaces.derive(Topology.CNN, ("early", "mid", "late"), ("conv_light", "conv_heavy"), True)
    layout = spaces.layout
    assert PolicySpaces.derive(Topology.CNN, ("early", "mid", "late"), ("conv_light", "conv_heavy")).layout == LAYOUT
    env = make_env(max_epochs=8, thresholds=GateThresholds(compute_budget=budget))
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "late", "conv_heavy"))
    env.step(Decision.wait())
    obs = dict(zip(layout.feature_names(), layout.featurize(env.signals).tolist(), strict=True))
    spent = 0.0 if budget is None else env.compute.train_share / budget
    assert obs["compute_budget_used"] == pytest.approx(spent) and (budget is None or spent > 0)
    for slot in env.signals.slots:
        for blueprint in ("conv_light", "conv_heavy"):
            fits = slot.seed_id is None and (budget is None or blueprint in slot.affordable_blueprints)
            assert obs[f"{slot.name}.fits_{blueprint}"] == float(fits), (slot.name, blueprint)
    assert obs["late.fits_conv_light"] == 0.0  # the slot holds a seed
    assert LAYOUT.featurize(env.signals).tolist() == layout.featurize(env.signals).tolist()[: LAYOUT.obs_dim]
