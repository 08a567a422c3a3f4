"""The counterfactual answers "what would removing this seed do", BatchNorm hosts included.

Each arm (with the seed, and with it ablated) is measured with BatchNorm statistics of its own
network, recomputed on the same training images; the references here are PyTorch's own
`update_bn` on copies of the model, never Esper's code.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch.optim.swa_utils import update_bn

from conftest import make_env
from esper.kasmina import CNNHost, GateInputs, MorphogeneticModel, TransformerHost
from esper.leyline import BlendSchedule, Decision, GateThresholds, LifecycleOp, SeedStage
from esper.leyline.constants import LOSS_READING_POINTS_PER_NAT
from esper.tolaria import get_task
from esper.tolaria.datasets import load_shapes
from esper.tolaria.training import ArmStatistics, ValidationStats, recalibrate_batchnorm, validate


def accuracy_of(model: MorphogeneticModel, batches, overrides=None, batchnorm_stats=None) -> float:
    model.eval()
    with torch.no_grad():
        correct = sum((model(x, overrides, batchnorm_stats).argmax(-1) == y).sum().item() for x, y in batches)
        total = sum(y.numel() for _, y in batches)
    return 100.0 * correct / total


def resettled_accuracy(model: MorphogeneticModel, train_batches, val_batches, cull: str | None) -> float:
    """Cull a copy's seed for real, let PyTorch's `update_bn` re-settle every BatchNorm layer on
    training batches, and measure: what removing the seed actually does."""
    arm = copy.deepcopy(model)
    if cull is not None:
        arm.slot(cull).cull("test: the real cull")
    update_bn(train_batches, arm)
    return accuracy_of(arm, val_batches)


@pytest.mark.slow
def test_a_seed_with_no_real_effect_reads_zero_where_stale_statistics_read_many_points() -> None:
    """Acceptance: a `norm` seed at `mid`, downstream of which sit BatchNorm layers, set to an
    exact identity map f(h) = h, so the stream becomes 2h. The next block is conv (no bias) then
    BatchNorm, which is scale invariant: the seed's real effect is nil. Forcing its alpha to 0
    under the statistics of the 2h network reads a large 'contribution' (the old measurement);
    the honest one reads zero, as does the real cull once statistics re-settle."""
    data = dataclasses.replace(
        load_shapes(0, n_train=8000, n_val=1000, n_test=200, image_size=16, samples_per_epoch=4000),
        calibration_size=1000,
    )
    task = dataclasses.replace(get_task("shapes"), load_data=lambda _: data)
    env = make_env(task, max_epochs=10)
    env.reset(0)
    for _ in range(8):
        env.step(Decision.wait())
    model = env.model
    slot = model.slot("mid")
    slot.germinate("norm", "seed-nil", BlendSchedule.LINEAR)
    while slot.stage is not SeedStage.PROBATIONARY:
        slot.tick(GateInputs(contribution=1.0, grad_norm=1.0))
    val_batches = list(env.passes.data.val_batches(500))
    calibration = list(env.passes.data.calibration_batches(500))
    seed_input = recalibrate_batchnorm(model, calibration, ()).model  # the seed's own: statistics of h
    norm = slot.seed.norm
    with torch.no_grad():  # gamma = std, beta = mean: the seed outputs its input exactly
        norm.running_mean.copy_(seed_input["slots.mid.seed.norm.running_mean"])
        norm.running_var.copy_(seed_input["slots.mid.seed.norm.running_var"])
        norm.weight.copy_((norm.running_var + norm.eps).sqrt())
        norm.bias.copy_(norm.running_mean)

    stats = validate(model, val_batches, ("mid",), calibration=calibration)
    contribution = stats.contribution("mid")
    # the old measurement: alpha 0 under the statistics the network with the seed has
    with_seed = recalibrate_batchnorm(model, calibration, ()).model
    stale = stats.accuracy - accuracy_of(model, val_batches, {"mid": 0.0}, with_seed)
    train_batches = list(env.passes.data.train_batches(100, torch.Generator().manual_seed(1)))
    real = resettled_accuracy(model, train_batches, val_batches, None) - resettled_accuracy(
        model, train_batches, val_batches, "mid"
    )
    assert stats.accuracy > 25.0  # a host that has learned something (chance is 10%)
    assert abs(real) <= 1.0  # the seed really does nothing
    assert abs(contribution) <= 1.0
    assert abs(contribution - real) <= 1.0
    assert stale > 3.0  # stale statistics read a large effect that is not there


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_recalibration_writes_no_module_state(mode: str) -> None:
    """The statistics come back as forward arguments (the model's own equal to what `update_bn`
    computes); no buffer changes, and the train/eval mode is put back."""
    torch.manual_seed(0)
    model = MorphogeneticModel(CNNHost(width=4))
    for name in ("early", "mid"):
        slot = model.slot(name)
        slot.germinate("conv_light", f"seed-{name}", BlendSchedule.LINEAR)
        with torch.no_grad():
            for p in slot.seed.parameters():
                p.add_(0.3 * torch.randn_like(p))
        while slot.stage is not SeedStage.PROBATIONARY:
            slot.tick(GateInputs(contribution=1.0, grad_norm=1.0))
    model.train(mode == "train")
    calibration = [(torch.randn(64, 3, 16, 16) + 1.0, torch.zeros(64, dtype=torch.long))]
    reference = copy.deepcopy(model)
    update_bn(calibration, reference)
    before = {k: v.clone() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    stats = recalibrate_batchnorm(model, calibration, ("early", "mid"))
    validate(model, calibration, ("early", "mid"), calibration=calibration)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    running = [k for k in before if k.endswith(("running_mean", "running_var"))]
    assert sorted(stats.model) == sorted(running)
    for key in running:
        torch.testing.assert_close(stats.model[key], reference.get_buffer(key), msg=key)
    assert set(stats.ablated) == {"early", "mid"}
    # an arm covers exactly the layers downstream of its slot: the mid arm never reaches early's seed
    mid_arm = stats.ablated["mid"]
    assert not any(key.startswith(("host.segments.0.", "host.segments.1.", "slots.early.")) for key in mid_arm)
    assert any(key.startswith("slots.mid.") for key in stats.ablated["early"])
    model.train(mode == "train")
    recalibrate_batchnorm(model, calibration, ())
    assert model.training is (mode == "train")


def test_pooled_statistics_over_batches_match_one_batch_of_everything() -> None:
    torch.manual_seed(1)
    model = MorphogeneticModel(CNNHost(width=4))
    images = torch.randn(120, 3, 16, 16) * 1.5 + 0.3
    labels = torch.zeros(120, dtype=torch.long)
    whole = recalibrate_batchnorm(model, [(images, labels)], ()).model
    batched = recalibrate_batchnorm(model, [(images[i : i + 40], labels[i : i + 40]) for i in range(0, 120, 40)], ())
    assert sorted(whole) == sorted(batched.model)
    for key, value in whole.items():
        torch.testing.assert_close(batched.model[key], value, rtol=0.03, atol=1e-4, msg=key)


def test_a_batchnorm_model_without_calibration_data_is_refused() -> None:
    model = MorphogeneticModel(CNNHost(width=4))
    batches = [(torch.randn(4, 3, 16, 16), torch.zeros(4, dtype=torch.long))]
    with pytest.raises(ValueError, match="calibration"):
        validate(model, batches, ())
    with pytest.raises(ValueError, match="calibration data yielded no batch"):
        validate(model, batches, (), calibration=[])


def test_a_model_without_batchnorm_needs_no_calibration() -> None:
    torch.manual_seed(0)
    model = MorphogeneticModel(TransformerHost(block_size=8, d_model=32, n_layer=3, n_slots=3))
    idx = torch.randint(0, 256, (4, 8))
    stats = validate(model, [(idx, idx)], ())
    assert recalibrate_batchnorm(model, [(idx, idx)], ()) == ArmStatistics({}, {})
    assert 0.0 <= stats.accuracy <= 100.0


@pytest.mark.parametrize("blueprint", ["conv_light", "widen_50"])
def test_the_loss_contribution_is_the_ablated_arm_s_loss_minus_the_model_s(blueprint: str) -> None:
    """The continuous reading beside accuracy: each arm's mean loss, with its own statistics."""
    torch.manual_seed(0)
    model = MorphogeneticModel(CNNHost(width=4))
    model.slot("mid").germinate(blueprint, "seed-0", BlendSchedule.LINEAR)
    model.slot("mid").lifecycle.load_state_dict(
        {"stage": int(SeedStage.PROBATIONARY), "epochs_in_stage": 1, "schedule": 0}
    )
    with torch.no_grad():
        for p in model.slot("mid").seed.parameters():
            p.copy_(0.1 * torch.randn_like(p))
    g = torch.Generator().manual_seed(4)
    batches = [(torch.randn(50, 3, 16, 16, generator=g), torch.randint(0, 10, (50,), generator=g)) for _ in range(3)]
    stats = validate(model, batches, ("mid",), calibration=batches)
    arms = recalibrate_batchnorm(model, batches, ("mid",))
    model.eval()
    with torch.no_grad():
        loss = [torch.nn.functional.cross_entropy(model(x, None, arms.model), y) for x, y in batches]
        arm = {**arms.model, **arms.ablated["mid"]}  # the shared prefix runs with the model's statistics
        ablated = [torch.nn.functional.cross_entropy(model(x, {"mid": 0.0}, arm), y) for x, y in batches]
    expected = float(sum(ablated) / 3 - sum(loss) / 3)
    assert stats.loss_contribution("mid") == pytest.approx(expected, abs=1e-5)
    assert stats.loss_contribution("early") is None


def test_the_loss_keep_reading_puts_the_loss_contribution_in_points() -> None:
    stats = ValidationStats(
        loss=1.0, accuracy=60.0, ablated_accuracy={"mid": 61.0}, ablated_loss={"mid": 1.02}, keep_reading="loss"
    )
    assert stats.contribution("mid") == pytest.approx(LOSS_READING_POINTS_PER_NAT * 0.02)
    assert stats.accuracy_contribution("mid") == pytest.approx(-1.0)
    assert dataclasses.replace(stats, keep_reading="accuracy").contribution("mid") == pytest.approx(-1.0)
    assert stats.contribution("early") is None


def test_a_bad_keep_reading_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="keep_reading 'fresh': choose from accuracy loss"):
        GateThresholds(keep_reading="fresh")


@pytest.mark.parametrize("reading", ["accuracy", "loss"])
def test_the_gates_and_the_signals_read_the_chosen_reading(reading: str) -> None:
    """What a controller sees as `contribution`, what G4 and the probation cull judge and what
    the events record are one reading: the one `keep_reading` names."""
    thresholds = GateThresholds(min_training_epochs=1, blend_epochs=1, keep_reading=reading)
    env = make_env(max_epochs=6, thresholds=thresholds)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    signals = None
    for _ in range(3):
        signals = env.step(Decision.wait()).signals
        if signals.slot("mid").contribution is not None:
            break
    mid = signals.slot("mid")
    val = env._last_val  # the measurement the signals were built from
    in_points = LOSS_READING_POINTS_PER_NAT * val.loss_contribution("mid")
    expected = in_points if reading == "loss" else val.accuracy_contribution("mid")
    assert mid.contribution == pytest.approx(expected)
    assert mid.loss_contribution == pytest.approx(val.loss_contribution("mid"))
