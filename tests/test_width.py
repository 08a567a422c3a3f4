"""Width seeds: new hidden units of a host layer pair that change nothing when germinated, and
merge into the host's own tensors (outputs and optimizer state carried) when fossilized."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from esper.kasmina import CNNHost, MorphogeneticModel, TransformerHost
from esper.kasmina.blueprints import WIDTH_BLUEPRINTS, Topology, get_blueprint
from esper.kasmina.optimizers import ModelOptimizers
from esper.kasmina.width import WidthSite
from esper.leyline import BlendSchedule, SeedStage
from esper.tolaria.training import recalibrate_batchnorm

WIDTH = tuple(WIDTH_BLUEPRINTS[Topology.CNN])
STANDARD_LAYERS = (nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.MaxPool2d, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Linear)


def cnn_model(width: int = 4) -> MorphogeneticModel:
    torch.manual_seed(0)
    return MorphogeneticModel(CNNHost(width=width, depth=3))


def gpt_model() -> MorphogeneticModel:
    torch.manual_seed(0)
    return MorphogeneticModel(TransformerHost(block_size=8, d_model=32, n_layer=3, n_slots=3))


def images(n: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def tokens(n: int = 4, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (n, 8), generator=torch.Generator().manual_seed(seed))


def put_in_stage(model: MorphogeneticModel, slot: str, stage: SeedStage) -> None:
    """Jump a seed to `stage` (the gates are tested elsewhere): PROBATIONARY is blended at alpha 1."""
    lifecycle = model.slot(slot).lifecycle
    lifecycle.load_state_dict({"stage": int(stage), "epochs_in_stage": 5, "schedule": int(BlendSchedule.LINEAR)})


def live_output_layer(model: MorphogeneticModel, slot: str) -> None:
    """Give a width seed's zero-initialised outgoing layers values, as training would."""
    seed = model.slot(slot).seed
    assert seed is not None
    outgoing = (seed.conv_out, seed.next_in) if hasattr(seed, "conv_out") else (seed.proj,)
    with torch.no_grad():
        for layer in outgoing:
            layer.weight.copy_(0.1 * torch.randn_like(layer.weight))


# --------------------------------------------------------------------------- germination
@pytest.mark.parametrize("blueprint", WIDTH)
@pytest.mark.parametrize("slot", ["early", "mid", "late"])
@pytest.mark.parametrize("stage", [SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY])
def test_a_new_width_seed_changes_no_output_in_train_or_eval_mode(blueprint: str, slot: str, stage) -> None:
    model, x = cnn_model(), images()
    before_eval = model.eval()(x)
    before_train = copy.deepcopy(model).train()(x)
    model.slot(slot).germinate(blueprint, "seed-0", BlendSchedule.LINEAR)
    put_in_stage(model, slot, stage)
    assert torch.equal(model.eval()(x), before_eval)
    assert torch.equal(model.train()(x), before_train)


@pytest.mark.parametrize("blueprint", WIDTH)
def test_a_new_transformer_width_seed_changes_no_output(blueprint: str) -> None:
    model, x = gpt_model(), tokens()
    before = model.eval()(x)
    model.slot("mid").germinate(blueprint, "seed-0", BlendSchedule.LINEAR)
    put_in_stage(model, "mid", SeedStage.PROBATIONARY)
    assert torch.equal(model(x), before)


def test_the_new_units_learn_from_the_first_step() -> None:
    """The dead-unit trap: zero incoming weights behind a ReLU get no gradient. The width seed's
    outgoing weights start at zero and get one at once; its incoming weights follow."""
    model, x = cnn_model(), images()
    model.slot("mid").germinate("widen_50", "seed-0", BlendSchedule.LINEAR)
    seed = model.slot("mid").seed
    F.cross_entropy(model.train()(x), torch.arange(8) % 10).backward()
    assert seed.conv_out.weight.grad.abs().sum() > 0
    assert seed.next_in.weight.grad.abs().sum() > 0
    # nothing flows back through a zero layer yet
    assert seed.conv_in.weight.grad.abs().sum() == 0 and seed.conv_new.weight.grad.abs().sum() == 0


def test_in_training_the_width_seed_is_isolated_from_the_host() -> None:
    """TRAINING: the host's gradient is the host's alone; the seed learns from the task loss."""
    x, y = images(), torch.arange(8) % 10
    plain = cnn_model()
    F.cross_entropy(plain.train()(x), y).backward()
    model = cnn_model()
    model.slot("early").germinate("widen_100", "seed-0", BlendSchedule.LINEAR)
    live_output_layer(model, "early")
    F.cross_entropy(model.train()(x), y).backward()
    for p, q in zip(plain.host.parameters(), model.host.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    assert model.slot("early").seed.conv_in.weight.grad.abs().sum() > 0


# --------------------------------------------------------------------------- counts and bad input
@pytest.mark.parametrize(
    ("topology", "blueprint", "site", "hand_count"),
    [
        # k = 2: conv_in 2*3*9 + BatchNorm 2*2 + conv_out 4*2*9 + conv_new 2*(4+2)*9 + BatchNorm 2*2
        # + next_in (the next block's 3x3 convolution, 8 outputs) 8*2*9
        (Topology.CNN, "widen_50", WidthSite(3, 4, 4, next_dim=8), 54 + 4 + 72 + 108 + 4 + 144),
        # k = 16: conv_in 16*8*9 + 32 + conv_out 16*16*9 + conv_new 16*32*9 + 32 + the classifier's 10*16
        (
            Topology.CNN,
            "widen_100",
            WidthSite(8, 16, 16, next_dim=10, next_is_conv=False),
            1152 + 32 + 2304 + 4608 + 32 + 160,
        ),
        # k = 32: fc 32*32 + 32 bias, proj 32*32
        (Topology.TRANSFORMER, "widen_25", WidthSite(32, 128, 32), 1024 + 32 + 1024),
    ],
)
def test_parameter_counts_equal_hand_counts(topology, blueprint, site, hand_count) -> None:
    bp = get_blueprint(topology, blueprint)
    assert bp.param_count(site) == hand_count
    assert sum(p.numel() for p in bp.build(site).parameters()) == hand_count


@given(
    hidden=st.integers(1, 64),
    fraction_name=st.sampled_from(WIDTH),
    in_dim=st.integers(1, 16),
    next_dim=st.integers(1, 32),
    next_is_conv=st.booleans(),
)
@settings(max_examples=40, deadline=None)
def test_a_width_blueprint_counts_what_it_builds(
    hidden: int, fraction_name: str, in_dim: int, next_dim: int, next_is_conv: bool
) -> None:
    bp = get_blueprint(Topology.CNN, fraction_name)
    site = WidthSite(in_dim, hidden, hidden, next_dim=next_dim, next_is_conv=next_is_conv)
    if round(bp.fraction * hidden) < 1:
        with pytest.raises(ValueError, match="less than one unit"):
            bp.param_count(site)
        return
    assert bp.param_count(site) == sum(p.numel() for p in bp.build(site).parameters())


def test_a_size_the_layer_refuses_names_the_slot_and_builds_nothing() -> None:
    model = cnn_model(width=1)  # early's layer pair has 1 hidden unit: 25% of it is none
    state = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match="slot 'early': widen_25 adds 25% of a layer's 1 hidden units"):
        model.slot("early").germinate("widen_25", "seed-0", BlendSchedule.LINEAR)
    assert model.slot("early").stage is SeedStage.DORMANT
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items() if isinstance(v, torch.Tensor))


def test_a_slot_without_a_layer_pair_refuses_a_width_seed() -> None:
    host = CNNHost(width=4)
    host.segments[0] = nn.Sequential(*host.segments[0])  # a plain segment: nothing declared to widen
    model = MorphogeneticModel(host)
    with pytest.raises(ValueError, match="slot 'early' has no layer pair to widen"):
        model.slot("early").seed_param_count("widen_50")
    assert model.slot("mid").seed_param_count("widen_50") > 0


# --------------------------------------------------------------------------- merge on fossilization
def grown_cnn(slot: str = "mid", blueprint: str = "widen_50") -> MorphogeneticModel:
    model = cnn_model()
    model.slot(slot).germinate(blueprint, "seed-0", BlendSchedule.LINEAR)
    live_output_layer(model, slot)
    put_in_stage(model, slot, SeedStage.PROBATIONARY)
    model.train()(images(32, seed=5))  # the seed's BatchNorm gets running statistics of its own
    model.slot(slot).fossilize(contribution=1.0)
    return model


@pytest.mark.parametrize("slot", ["early", "mid", "late"])
@pytest.mark.parametrize("blueprint", WIDTH)
def test_the_merge_leaves_outputs_equal_and_the_host_plain(slot: str, blueprint: str) -> None:
    model, x = grown_cnn(slot, blueprint), images()
    before_eval, before_train = model.eval()(x), copy.deepcopy(model).train()(x)
    host_params = model.host_param_count()
    seed_params = model.slot(slot).param_count()
    model.merge_width_seed(slot)
    torch.testing.assert_close(model.eval()(x), before_eval, rtol=0, atol=1e-5)
    torch.testing.assert_close(model.host.eval()(x), before_eval, rtol=0, atol=1e-5)
    torch.testing.assert_close(model.train()(x), before_train, rtol=0, atol=1e-5)  # BatchNorm on batch statistics
    assert model.slot(slot).seed is None and model.slot(slot).stage is SeedStage.FOSSILIZED
    assert (model.host_param_count(), model.slot(slot).param_count()) == (host_params, seed_params)
    assert sum(p.numel() for p in model.host.parameters()) == host_params + seed_params
    assert all(isinstance(m, STANDARD_LAYERS) for m in model.host.modules() if not list(m.children()))


def grow_every_block(blueprint: str) -> MorphogeneticModel:
    """A width-8 host with a trained-looking width seed of `blueprint` in every slot, fossilized."""
    model = cnn_model(width=8)
    for slot in ("early", "mid", "late"):
        model.slot(slot).germinate(blueprint, f"seed-{slot}", BlendSchedule.LINEAR)
        live_output_layer(model, slot)
        put_in_stage(model, slot, SeedStage.PROBATIONARY)
    model.train()(images(32, seed=5))
    for slot in ("early", "mid", "late"):
        model.slot(slot).fossilize(contribution=1.0)
    return model


@pytest.mark.parametrize("order", list(itertools.permutations(("early", "mid", "late"))))
def test_merging_every_block_in_any_order_gives_the_static_wider_host(order: tuple[str, ...]) -> None:
    """Each merge widens a layer a neighbour's seed reads or feeds: the neighbour keeps working
    on the channels it was built on, and its own merge pads it with zeros. Grown by a quarter
    everywhere, the host has exactly the layers of a static host of width 10."""
    model, x = grow_every_block("widen_25"), images()
    before = model.eval()(x)
    for slot in order:
        model.merge_width_seed(slot)
        torch.testing.assert_close(model.eval()(x), before, rtol=0, atol=1e-5)
    static = CNNHost(width=10, depth=3)
    assert [p.shape for p in model.host.parameters()] == [p.shape for p in static.parameters()]
    assert sum(model.slot(s).param_count() for s in order) + model.host_param_count() == sum(
        p.numel() for p in static.parameters()
    )


def test_a_seed_germinated_after_its_neighbour_merged_reads_the_wider_stream() -> None:
    model, x = cnn_model(width=8), images()
    for slot in ("early", "mid"):
        model.slot(slot).germinate("widen_50", f"seed-{slot}", BlendSchedule.LINEAR)
        live_output_layer(model, slot)
        put_in_stage(model, slot, SeedStage.PROBATIONARY)
        model.slot(slot).fossilize(contribution=1.0)
        if slot == "early":
            model.merge_width_seed("early")
    assert model.slot("mid").seed.conv_in.in_channels == 12
    live_output_layer(model, "mid")
    put_in_stage(model, "mid", SeedStage.PROBATIONARY)
    model.slot("mid").fossilize(contribution=1.0)
    before = model.eval()(x)
    model.merge_width_seed("mid")
    torch.testing.assert_close(model.eval()(x), before, rtol=0, atol=1e-5)


@pytest.mark.parametrize("merged_first", ["early", "mid"])
def test_a_live_seed_beside_a_merged_one_round_trips_through_the_state_dict(merged_first: str) -> None:
    """Rollbacks and grown files load a model whose live seed was built before its neighbour's
    merge widened the layer it reads (early merged) or feeds (mid merged): the seed is rebuilt at
    the site it was built at, not the host's site now."""
    model, x = grow_every_block("widen_50"), images()
    model.merge_width_seed(merged_first)
    fresh = cnn_model(width=8)
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(fresh.eval()(x), model.eval()(x), rtol=0, atol=0)
    live = "mid" if merged_first == "early" else "early"
    assert fresh.slot(live).seed_site == model.slot(live).seed_site != model.slot(live).width_site


def test_the_transformer_merge_leaves_outputs_equal() -> None:
    model, x = gpt_model(), tokens()
    model.slot("late").germinate("widen_50", "seed-0", BlendSchedule.LINEAR)
    live_output_layer(model, "late")
    put_in_stage(model, "late", SeedStage.PROBATIONARY)
    model.slot("late").fossilize(contribution=1.0)
    before = model.eval()(x)
    model.merge_width_seed("late")
    torch.testing.assert_close(model(x), before, rtol=0, atol=1e-5)
    assert model.host.segments[2][-1].mlp.fc.out_features == 128 + 64


def test_only_a_fossilized_width_seed_merges() -> None:
    model = cnn_model()
    model.slot("mid").germinate("widen_50", "seed-0", BlendSchedule.LINEAR)
    with pytest.raises(ValueError, match="no fossilized width seed"):
        model.merge_width_seed("mid")


def test_a_merged_model_round_trips_through_its_state_dict() -> None:
    """Snapshots, rollbacks and grown-network files load a merged host into a fresh one: the
    wider layers are rebuilt from the state dict's extra state before their tensors load."""
    model, x = grown_cnn(), images()
    model.merge_width_seed("mid")
    fresh = cnn_model()
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh.eval()(x), model.eval()(x))
    assert fresh.slot("mid").param_count() == model.slot("mid").param_count()
    narrow = cnn_model().state_dict()
    model.load_state_dict(narrow)  # and back: a rollback to before the merge
    assert model.host.segments[1][0].out_channels == 8


def train_steps(model: MorphogeneticModel, optimizers: ModelOptimizers, steps: int, seed: int) -> None:
    for i in range(steps):
        x, y = images(16, seed=seed + i), torch.arange(16) % 10
        for opt in optimizers.all():
            opt.zero_grad(set_to_none=True)
        F.cross_entropy(model.train()(x), y).backward()
        for opt in optimizers.all():
            opt.step()


def test_the_merge_carries_the_optimizer_state() -> None:
    """Merged or not, the next step is the same: the host's AdamW takes over the seed's moments."""
    model = cnn_model()
    optimizers = ModelOptimizers(model.host_parameters(), torch.device("cpu"), 1e-2, 1e-2, 1e-4)
    model.slot("mid").germinate("widen_50", "seed-0", BlendSchedule.LINEAR)
    put_in_stage(model, "mid", SeedStage.PROBATIONARY)
    optimizers.add_seed("mid", model.slot("mid").seed.parameters())
    train_steps(model, optimizers, 3, seed=10)
    model.slot("mid").fossilize(contribution=1.0)
    unmerged, unmerged_opts = copy.deepcopy((model, optimizers))
    optimizers.merge_seed("mid", model.merge_width_seed("mid"))
    assert optimizers.seeds == {}
    assert len(optimizers.host.state) == len(list(model.host_parameters()))
    train_steps(model, optimizers, 2, seed=20)
    train_steps(unmerged, unmerged_opts, 2, seed=20)
    x = images()
    torch.testing.assert_close(model.eval()(x), unmerged.eval()(x), rtol=0, atol=1e-5)


def test_merges_next_to_each_other_carry_the_optimizer_state() -> None:
    """Block 1's first convolution gathers the host's moments, the `mid` seed's rows, the
    `early` seed's columns (its new channels' inflow) and, where the two seeds never met, zeros:
    weights that are zero and start with zero moments, free to learn from the next step on."""
    model = grow_every_block("widen_50")  # early adds 4 channels, mid 8
    optimizers = ModelOptimizers(model.host_parameters(), torch.device("cpu"), 1e-2, 1e-2, 1e-4)
    for slot in ("early", "mid", "late"):
        optimizers.add_seed(slot, model.slot(slot).seed.parameters())
    train_steps(model, optimizers, 3, seed=50)
    host_state = optimizers.host.state[model.host.segments[1][0].weight]
    mid_state = optimizers.seeds["mid"].state[model.slot("mid").seed.conv_in.weight]
    early_state = optimizers.seeds["early"].state[model.slot("early").seed.next_in.weight]
    for slot in ("mid", "early", "late"):
        optimizers.merge_seed(slot, model.merge_width_seed(slot))
    assert len(optimizers.host.state) == len(list(model.host_parameters()))
    merged = model.host.segments[1][0].weight
    assert merged.shape[:2] == (16 + 8, 8 + 4)
    assert torch.all(merged[16:, 8:] == 0)
    state = optimizers.host.state[merged]
    for key in ("exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(state[key][:16, :8], host_state[key])
        torch.testing.assert_close(state[key][16:, :8], mid_state[key])
        torch.testing.assert_close(state[key][:16, 8:], early_state[key])
        assert torch.all(state[key][16:, 8:] == 0)


def test_a_late_seed_keeps_its_bias_corrected_moments() -> None:
    """A seed younger than the host: its moments are rescaled to the host's step count."""
    model = cnn_model()
    optimizers = ModelOptimizers(model.host_parameters(), torch.device("cpu"), 1e-2, 1e-2, 0.0)
    train_steps(model, optimizers, 4, seed=30)
    model.slot("mid").germinate("widen_50", "seed-0", BlendSchedule.LINEAR)
    put_in_stage(model, "mid", SeedStage.PROBATIONARY)
    optimizers.add_seed("mid", model.slot("mid").seed.parameters())
    train_steps(model, optimizers, 2, seed=40)
    seed_in = model.slot("mid").seed.conv_in.weight
    seed_state = optimizers.seeds["mid"].state[seed_in]
    model.slot("mid").fossilize(contribution=1.0)
    optimizers.merge_seed("mid", model.merge_width_seed("mid"))
    merged = model.host.segments[1][0].weight
    state = optimizers.host.state[merged]
    assert float(state["step"]) == 6.0
    b2 = 0.999
    corrected_seed = seed_state["exp_avg_sq"] / (1 - b2**2)
    corrected_merged = state["exp_avg_sq"][8:] / (1 - b2**6)
    torch.testing.assert_close(corrected_merged, corrected_seed)


# --------------------------------------------------------------------------- counterfactual
def test_the_ablated_arm_of_a_width_seed_is_the_host_without_it() -> None:
    """Alpha 0 removes the new units; each arm is measured with its own BatchNorm statistics,
    and the shared prefix (the input of the widened segment) is computed once."""
    model, x = cnn_model(), images(32, seed=3)
    plain = copy.deepcopy(model)
    model.slot("mid").germinate("widen_100", "seed-0", BlendSchedule.LINEAR)
    live_output_layer(model, "mid")
    put_in_stage(model, "mid", SeedStage.PROBATIONARY)
    stats = recalibrate_batchnorm(model, [(x, None)], ("mid",))
    assert any(name.startswith("slots.mid.seed.") for name in stats.model)
    assert "host.segments.1.4.running_mean" in stats.ablated["mid"]  # the widened block's BN
    assert not any(name.startswith("host.segments.0.") for name in stats.ablated["mid"])
    out, ablated = model.eval().forward_with_ablations(x, ("mid",), stats.model, stats.ablated)
    plain_stats = recalibrate_batchnorm(plain, [(x, None)], ())
    torch.testing.assert_close(ablated["mid"], plain.eval()(x, batchnorm_stats=plain_stats.model))
    torch.testing.assert_close(out, model(x, batchnorm_stats=stats.model))
    assert not torch.allclose(out, ablated["mid"])


def test_random_controller_germinates_width_seeds_when_allowed() -> None:
    """Its head is the residual blueprints plus the width ones a run allows (none by default)."""
    from esper.tamiyo import RandomController
    from esper.tamiyo.actions import ActionSpace

    assert ActionSpace(Topology.CNN, ("early",)).blueprints == ActionSpace(Topology.CNN, ("early",), ()).blueprints
    controller = RandomController(Topology.CNN, ("early", "mid", "late"), ("widen_50",), rng_seed=3)
    assert controller.actions.blueprints[-1] == "widen_50"
    assert controller.actions.blueprint_mask().tolist() == [False] * 6 + [True]


# --------------------------------------------------------------------------- gate dwell
def test_a_width_seed_dwells_by_the_width_thresholds_and_a_residual_one_by_the_others() -> None:
    from esper.leyline import GateThresholds

    thresholds = GateThresholds(min_training_epochs=3, blend_epochs=3, width_training_epochs=1, width_blend_epochs=2)
    model = MorphogeneticModel(CNNHost(width=4, depth=3), thresholds)
    model.slot("early").germinate("widen_25", "w", BlendSchedule.LINEAR)
    model.slot("mid").germinate("conv_light", "r", BlendSchedule.LINEAR)
    assert model.slot("early").lifecycle.thresholds.min_training_epochs == 1
    assert model.slot("early").lifecycle.thresholds.blend_epochs == 2
    assert model.slot("mid").lifecycle.thresholds == thresholds
    fresh = MorphogeneticModel(CNNHost(width=4, depth=3), thresholds)
    fresh.load_state_dict(model.state_dict())  # a rollback or a grown file keeps the width dwell
    assert fresh.slot("early").lifecycle.thresholds == thresholds.for_width_seed()
    model.slot("early").cull()
    assert model.slot("early").lifecycle.thresholds == thresholds  # the slot's next seed may be residual


def test_the_width_dwell_must_be_positive_and_within_the_training_limit() -> None:
    from esper.leyline import GateThresholds

    with pytest.raises(ValueError, match="width_blend_epochs must be >= 1"):
        GateThresholds(width_blend_epochs=0)
    with pytest.raises(ValueError, match="max_training_epochs must be >= width_training_epochs"):
        GateThresholds(max_training_epochs=2, min_training_epochs=1, width_training_epochs=3)
