"""The morphogenetic model: blueprints, gradient routing, the functional counterfactual."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.optim.swa_utils import update_bn

from esper.kasmina import (
    BLUEPRINTS,
    CNNHost,
    GateInputs,
    MorphogeneticModel,
    Topology,
    TransformerHost,
    get_blueprint,
)
from esper.kasmina.isolation import straight_through
from esper.leyline import BlendSchedule, GateThresholds, SeedStage
from esper.tolaria.training import recalibrate_batchnorm, validate


def cnn_model(seed: int = 0, width: int = 4) -> MorphogeneticModel:
    torch.manual_seed(seed)
    return MorphogeneticModel(CNNHost(width=width, depth=3))


def advance_to(model: MorphogeneticModel, slot: str, stage: SeedStage, blueprint: str = "conv_light") -> None:
    """Germinate `slot` and tick it (with healthy inputs) until it reaches `stage`."""
    s = model.slot(slot)
    s.germinate(blueprint, f"seed-{slot}", BlendSchedule.LINEAR)
    with torch.no_grad():  # as if trained: new seeds start as an exact identity (zero output)
        for p in s.seed.parameters():
            p.add_(0.2 * torch.randn_like(p))
    while s.stage is not stage:
        s.tick(GateInputs(contribution=1.0, grad_norm=1.0, finite=True))


@pytest.mark.parametrize("topology", list(Topology))
def test_blueprint_param_counts_are_exact(topology: Topology) -> None:
    for dim in (8, 16, 48, 64):
        for bp in BLUEPRINTS[topology].values():
            module = bp.build(dim)
            assert sum(p.numel() for p in module.parameters()) == bp.param_count(dim), (bp.name, dim)


@pytest.mark.parametrize("topology", list(Topology))
def test_blueprints_keep_the_stream_shape(topology: Topology) -> None:
    x = torch.randn(2, 16, 8, 8) if topology is Topology.CNN else torch.randn(2, 5, 32)
    for bp in BLUEPRINTS[topology].values():
        assert bp.build(x.shape[1] if topology is Topology.CNN else 32)(x).shape == x.shape


def test_wrong_topology_blueprint_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"'lora' is a transformer blueprint.*choose from: norm attention"):
        get_blueprint(Topology.CNN, "lora")
    with pytest.raises(ValueError, match="unknown blueprint 'conv_heavy' for a transformer host"):
        get_blueprint(Topology.TRANSFORMER, "conv_heavy")
    model = cnn_model()
    with pytest.raises(ValueError, match="mlp"):
        model.slot("mid").germinate("mlp", "s", BlendSchedule.LINEAR)
    assert model.slot("mid").stage is SeedStage.DORMANT


def test_host_declares_its_slots() -> None:
    assert [s.name for s in CNNHost(depth=3).slot_ids] == ["early", "mid", "late"]
    assert [s.name for s in CNNHost(depth=5).slot_ids] == ["early", "mid", "late", "s3", "s4"]
    t = TransformerHost(n_layer=6, n_slots=3)
    assert [s.name for s in t.slot_ids] == ["early", "mid", "late"] and t.slot_dims == (64, 64, 64)
    assert [s.slot_id.name for s in MorphogeneticModel(CNNHost(depth=4)).ordered_slots()] == [
        "early",
        "mid",
        "late",
        "s3",
    ]


@pytest.mark.parametrize("topology", list(Topology))
def test_new_seeds_start_as_an_identity(topology: Topology) -> None:
    x = torch.randn(2, 16, 8, 8) if topology is Topology.CNN else torch.randn(2, 5, 32)
    for bp in BLUEPRINTS[topology].values():
        seed = bp.build(16 if topology is Topology.CNN else 32)
        assert torch.count_nonzero(seed(x)) == 0, bp.name


def test_dormant_model_equals_host() -> None:
    model = cnn_model()
    x = torch.randn(3, 3, 16, 16)
    model.eval()
    torch.testing.assert_close(model(x), model.host(x), rtol=0, atol=0)


@pytest.mark.parametrize("slot", ["early", "mid", "late"])
def test_training_stage_output_is_the_host_exactly_and_seed_gets_gradient(slot: str) -> None:
    model = cnn_model()
    x = torch.randn(4, 3, 16, 16)
    model.eval()
    before = model(x)
    advance_to(model, slot, SeedStage.TRAINING)
    model.eval()
    after = model(x)
    assert torch.equal(before, after)
    after.square().mean().backward()
    seed_grads = [p.grad for p in model.slot(slot).seed.parameters()]
    assert all(g is not None for g in seed_grads)
    assert sum(g.abs().sum() for g in seed_grads) > 0


def test_training_stage_is_exact_in_train_mode_with_a_batchnorm_seed() -> None:
    """In train() mode (batch statistics everywhere) the TRAINING output is still the host's."""
    x = torch.randn(8, 3, 16, 16)
    plain, grown = cnn_model(), cnn_model()
    advance_to(grown, "early", SeedStage.TRAINING, "conv_heavy")  # conv + BatchNorm inside the seed
    plain.train()
    grown.train()
    assert torch.equal(plain(x), grown(x))


def test_training_stage_isolates_host_upstream_from_the_seed() -> None:
    """Host gradients in TRAINING are exactly those of the host alone."""
    x = torch.randn(4, 3, 16, 16)
    plain = cnn_model()
    grown = cnn_model()
    advance_to(grown, "mid", SeedStage.TRAINING, "conv_heavy")
    for m in (plain, grown):
        m.eval()
        m(x).square().mean().backward()
    for (name, p), q in zip(plain.host.named_parameters(), grown.host.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=name)


def test_from_blending_on_upstream_host_gets_gradient_through_the_seed() -> None:
    x = torch.randn(4, 3, 16, 16)
    plain = cnn_model()
    grown = cnn_model()
    advance_to(grown, "late", SeedStage.BLENDING, "conv_heavy")
    for stage in (SeedStage.BLENDING, SeedStage.PROBATIONARY):
        if stage is SeedStage.PROBATIONARY:
            advance_to_stage_only(grown, "late", stage)
        for m in (plain, grown):
            m.zero_grad()
            m.eval()
            m(x).square().mean().backward()
        upstream = grown.host.segments[0][0].weight.grad  # first conv, upstream of every slot
        assert upstream is not None and upstream.abs().sum() > 0
        # The seed's path adds gradient: upstream gradients differ from the host-alone ones.
        assert not torch.allclose(upstream, plain.host.segments[0][0].weight.grad)


def advance_to_stage_only(model: MorphogeneticModel, slot: str, stage: SeedStage) -> None:
    s = model.slot(slot)
    while s.stage is not stage:
        s.tick(GateInputs(contribution=1.0, grad_norm=1.0, finite=True))


def test_straight_through_is_dtype_safe_under_autocast() -> None:
    host = torch.randn(4, 8, requires_grad=True)
    seed_out = torch.randn(4, 8, dtype=torch.bfloat16, requires_grad=True)
    out = straight_through(host, seed_out)
    assert out.dtype == torch.float32
    assert torch.equal(out, host)
    out.sum().backward()
    assert seed_out.grad is not None and torch.all(seed_out.grad == 1)

    model = cnn_model()
    advance_to(model, "mid", SeedStage.TRAINING)
    x = torch.randn(2, 3, 16, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
    y.float().sum().backward()
    assert all(p.grad is not None for p in model.slot("mid").seed.parameters())


@pytest.mark.parametrize("slot", ["early", "mid", "late"])
def test_counterfactual_override_equals_model_with_slot_emptied(slot: str) -> None:
    model = cnn_model()
    for name in ("early", "mid", "late"):
        advance_to(model, name, SeedStage.PROBATIONARY, "conv_heavy")
    model.eval()
    x = torch.randn(5, 3, 16, 16)
    ablated = model(x, alpha_overrides={slot: 0.0})

    emptied = cnn_model()
    emptied.load_state_dict(model.state_dict())
    emptied.slot(slot).cull()
    emptied.eval()
    torch.testing.assert_close(ablated, emptied(x), rtol=0, atol=0)
    assert not torch.allclose(ablated, model(x))
    assert model.slot(slot).seed is not None  # the override mutated nothing


def three_blended_seeds() -> MorphogeneticModel:
    model = cnn_model()
    for name in ("early", "mid", "late"):
        advance_to(model, name, SeedStage.BLENDING if name == "mid" else SeedStage.PROBATIONARY, "conv_light")
    return model


def recalibrated_copy(model: MorphogeneticModel, calibration, culled: str | None) -> MorphogeneticModel:
    """The naive arm: a copy of the model, the seed culled for an ablated arm, whose BatchNorm
    statistics PyTorch's own `update_bn` recomputes."""
    arm = copy.deepcopy(model)
    if culled is not None:
        arm.slot(culled).cull()
    update_bn(calibration, arm)
    return arm.eval()


def test_fused_counterfactual_equals_recalibrated_copies() -> None:
    """Each arm of the fused pass (shared prefixes, statistics as a forward argument) computes
    exactly what a recalibrated copy of its own network computes."""
    model = three_blended_seeds()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 3, 16, 16, generator=g)
    calibration = [(torch.randn(80, 3, 16, 16, generator=g) * 2 + 0.5, torch.zeros(80, dtype=torch.long))]
    names = model.blended_slots()
    assert names == ("early", "mid", "late")
    stats = recalibrate_batchnorm(model, calibration, names)
    model.eval()
    with torch.no_grad():
        out, ablated = model.forward_with_ablations(x, names, stats.model, stats.ablated)
        torch.testing.assert_close(out, recalibrated_copy(model, calibration, None)(x))
        torch.testing.assert_close(model(x, batchnorm_stats=stats.model), out)
        for name in names:
            naive = recalibrated_copy(model, calibration, name)(x)
            torch.testing.assert_close(ablated[name], naive)
            torch.testing.assert_close(model(x, {name: 0.0}, {**stats.model, **stats.ablated[name]}), naive)
            if name != "late":  # BatchNorm downstream: the model's own statistics are stale for this arm
                assert (model(x, {name: 0.0}) - naive).abs().max() > 0.1


def test_fused_validation_equals_separate_passes() -> None:
    model = three_blended_seeds()
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(60, 3, 16, 16, generator=g)
    ys = torch.randint(0, 10, (60,), generator=g)
    batches = [(xs[i : i + 25], ys[i : i + 25]) for i in range(0, 60, 25)]
    calibration = [(torch.randn(80, 3, 16, 16, generator=g) * 2 + 0.5, torch.zeros(80, dtype=torch.long))]
    names = model.blended_slots()
    fused = validate(model, batches, names, calibration=calibration)

    def accuracy(culled: str | None) -> float:
        arm = recalibrated_copy(model, calibration, culled)
        with torch.no_grad():
            correct = sum((arm(x).argmax(1) == y).sum().item() for x, y in batches)
        return 100.0 * correct / 60

    plain = accuracy(None)
    assert fused.accuracy == pytest.approx(plain)
    for name in names:
        assert fused.ablated_accuracy[name] == pytest.approx(accuracy(name))
        assert fused.contribution(name) == pytest.approx(plain - accuracy(name))


def test_transformer_counterfactual_and_causality() -> None:
    torch.manual_seed(0)
    model = MorphogeneticModel(TransformerHost(block_size=12, d_model=32, n_layer=3, n_slots=3))
    advance_to(model, "mid", SeedStage.PROBATIONARY, "attention")
    model.eval()
    idx = torch.randint(0, 256, (2, 12))
    out, ablated = model.forward_with_ablations(idx, ("mid",))
    torch.testing.assert_close(out, model(idx))
    torch.testing.assert_close(ablated["mid"], model(idx, {"mid": 0.0}))
    # changing a later token never changes earlier predictions (the seed attention is causal too)
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 256
    torch.testing.assert_close(model(changed)[:, :-1], out[:, :-1])


def test_state_dict_rebuilds_seeds_and_lifecycles() -> None:
    model = cnn_model()
    advance_to(model, "early", SeedStage.BLENDING, "bottleneck")
    advance_to(model, "late", SeedStage.PROBATIONARY, "attention")
    model.slot("late").tick(GateInputs(contribution=1.0, grad_norm=1.0))
    model.slot("late").fossilize(1.0)
    model.slot("mid").germinate("depthwise", "seed-m", BlendSchedule.SIGMOID)
    model.slot("mid").cull()
    fresh = cnn_model(seed=5)
    fresh.load_state_dict(model.state_dict())
    for a, b in zip(model.ordered_slots(), fresh.ordered_slots(), strict=True):
        assert (a.stage, a.blueprint, a.seed_id, a.lifecycle.epochs_in_stage, a.lifecycle.schedule) == (
            b.stage,
            b.blueprint,
            b.seed_id,
            b.lifecycle.epochs_in_stage,
            b.lifecycle.schedule,
        )
    x = torch.randn(3, 3, 16, 16)
    model.eval()
    fresh.eval()
    torch.testing.assert_close(model(x), fresh(x), rtol=0, atol=0)


def test_weights_only_checkpoint_round_trip(tmp_path) -> None:
    model = cnn_model()
    advance_to(model, "mid", SeedStage.BLENDING, "conv_heavy")
    torch.save(model.state_dict(), tmp_path / "m.pt")
    fresh = cnn_model(seed=3)
    fresh.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    assert fresh.slot("mid").blueprint == "conv_heavy" and fresh.slot("mid").stage is SeedStage.BLENDING


def test_alpha_overrides_are_validated() -> None:
    model = cnn_model()
    x = torch.randn(1, 3, 16, 16)
    with pytest.raises(ValueError, match="unknown slot 'middle'"):
        model(x, {"middle": 0.0})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        model(x, {"mid": 1.5})


def test_custom_thresholds_reach_every_slot() -> None:
    model = MorphogeneticModel(CNNHost(width=4), GateThresholds(blend_epochs=5))
    assert all(s.lifecycle.thresholds.blend_epochs == 5 for s in model.ordered_slots())
