"""Training compute, counted: FLOPs per layer as hand counts give them, and an episode's total
as the sum of its epochs as trained."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_env, tiny_shapes_data, tiny_shapes_task
from esper.kasmina import CNNHost, MorphogeneticModel
from esper.leyline import BlendSchedule, Decision, LifecycleOp, SeedStage
from esper.tamiyo import StaticController
from esper.tolaria.compute import (
    measurement_flops_per_sample,
    static_train_gflops,
    training_flops_per_sample,
    width_for_train_gflops,
)
from esper.tolaria.episode import run_episode

SAMPLE = (torch.zeros(1, 3, 16, 16), torch.zeros(1, dtype=torch.long))


def conv_flops(c_in: int, c_out: int, side: int) -> int:
    """A 3x3 convolution with padding 1: one multiply and one add per weight and output pixel."""
    return 2 * c_in * c_out * 9 * side * side


def cnn(width: int = 4) -> MorphogeneticModel:
    torch.manual_seed(0)
    return MorphogeneticModel(CNNHost(width=width, depth=3))


def test_a_static_host_forward_is_the_hand_count() -> None:
    w = 4  # blocks of 4, 8, 16 channels at 16x16, 8x8, 4x4; a 16 -> 10 linear head
    hand = (
        conv_flops(3, w, 16) + conv_flops(w, w, 16)
        + conv_flops(w, 2 * w, 8) + conv_flops(2 * w, 2 * w, 8)
        + conv_flops(2 * w, 4 * w, 4) + conv_flops(4 * w, 4 * w, 4)
        + 2 * 4 * w * 10
    )  # fmt: skip
    assert measurement_flops_per_sample(cnn(w), SAMPLE, ()) == hand


@pytest.mark.parametrize(("blueprint", "units"), [("widen_25", 2), ("widen_50", 4), ("widen_100", 8)])
def test_a_width_seed_adds_its_hand_count(blueprint: str, units: int) -> None:
    """mid's block: 4 channels in, 8 hidden, 8 out, at 8x8, then block 2's first conv (8 -> 16)
    at 4x4. The seed adds convs 4 -> k and k -> 8 (its hidden channels), 8 + k -> k (its output
    channels), and k -> 16 into block 2."""
    model = cnn()
    before = measurement_flops_per_sample(model, SAMPLE, ())
    model.slot("mid").germinate(blueprint, "seed-0", BlendSchedule.LINEAR)
    model.slot("mid").lifecycle.load_state_dict(
        {"stage": int(SeedStage.PROBATIONARY), "epochs_in_stage": 1, "schedule": 0}
    )
    added = measurement_flops_per_sample(model, SAMPLE, ()) - before
    hidden = conv_flops(4, units, 8) + conv_flops(units, 8, 8)
    assert added == hidden + conv_flops(8 + units, units, 8) + conv_flops(units, 16, 4)


def test_the_counterfactual_arm_of_a_width_seed_reruns_from_its_segment() -> None:
    model = cnn()
    model.slot("mid").germinate("widen_50", "seed-0", BlendSchedule.LINEAR)
    model.slot("mid").lifecycle.load_state_dict(
        {"stage": int(SeedStage.PROBATIONARY), "epochs_in_stage": 1, "schedule": 0}
    )
    with_seed = measurement_flops_per_sample(model, SAMPLE, ())
    arm = conv_flops(4, 8, 8) + conv_flops(8, 8, 8) + conv_flops(8, 16, 4) + conv_flops(16, 16, 4) + 2 * 16 * 10
    assert measurement_flops_per_sample(model, SAMPLE, ("mid",)) == with_seed + arm


def test_training_counts_forward_and_backward_and_leaves_the_model_alone() -> None:
    model = cnn()
    state = {k: v.clone() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    forward = measurement_flops_per_sample(model, SAMPLE, ())
    train = training_flops_per_sample(model, SAMPLE)
    # backward: gradients of weights and inputs (2x forward), but no input gradient for the first conv
    assert train == 3 * forward - conv_flops(3, 4, 16)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert all(p.grad is None for p in model.parameters())


def test_a_static_episode_costs_what_its_whole_run_costs(monkeypatch) -> None:
    task = tiny_shapes_task()
    env = make_env(task, max_epochs=3)
    outcome = run_episode(env, StaticController(), rng_seed=0, episode=0)
    expected = static_train_gflops(task, task.host_width, tiny_shapes_data(), epochs=3)
    assert outcome.train_gflops == pytest.approx(expected, rel=1e-12)
    assert outcome.measure_gflops > 0
    assert width_for_train_gflops(task, tiny_shapes_data(), 3, outcome.train_gflops) == task.host_width


def test_growth_costs_compute_epoch_by_epoch() -> None:
    static = run_episode(make_env(max_epochs=4), StaticController(), rng_seed=0, episode=0)
    env = make_env(max_epochs=4)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "late", "widen_100"))  # trains (isolated) from the first epoch
    while not env.episode_over:
        env.step(Decision.wait())
    assert env.compute.train_gflops > static.train_gflops


def test_a_wider_static_host_costs_more() -> None:
    data, task = tiny_shapes_data(), tiny_shapes_task()
    costs = [static_train_gflops(task, w, data, epochs=1) for w in (2, 4, 8)]
    assert costs == sorted(costs) and costs[0] > 0
    assert width_for_train_gflops(task, data, 1, costs[2]) == 8


def test_a_network_is_counted_once_per_architecture(monkeypatch) -> None:
    """Counting passes run when the network's shapes or its seeds' roles change, not every epoch."""
    from esper.tolaria import compute

    calls = []
    real = compute.training_flops_per_sample
    monkeypatch.setattr(compute, "training_flops_per_sample", lambda m, s: calls.append(1) or real(m, s))
    meter = compute.ComputeMeter(tiny_shapes_data(), torch.device("cpu"))
    model = cnn()
    meter.add_training_epoch(model, 10)
    meter.add_training_epoch(model, 10)
    assert len(calls) == 1
    model.slot("mid").germinate("widen_50", "seed-0", BlendSchedule.LINEAR)  # TRAINING: computes, isolated
    meter.add_training_epoch(model, 10)
    model.slot("mid").lifecycle.load_state_dict(
        {"stage": int(SeedStage.PROBATIONARY), "epochs_in_stage": 1, "schedule": 0}
    )
    meter.add_training_epoch(model, 10)
    assert len(calls) == 3
    per_sample = [real(cnn(), SAMPLE)] * 2
    assert meter.train_flops > sum(per_sample) * 10


@pytest.mark.parametrize("text", [False, True])
def test_the_measurement_count_is_what_a_measurement_runs(text: bool) -> None:
    """Against a counter around the env's own measurement: calibration only where the host has
    BatchNorm (a transformer has none), and every counterfactual arm."""
    from torch.utils.flop_counter import FlopCounterMode

    from conftest import tiny_text_task

    env = make_env(tiny_text_task() if text else tiny_shapes_task(), max_epochs=3)
    env.reset(0)
    env.model.slot("mid").germinate("widen_50", "seed-0", BlendSchedule.LINEAR)
    env.model.slot("mid").lifecycle.load_state_dict(
        {"stage": int(SeedStage.PROBATIONARY), "epochs_in_stage": 1, "schedule": 0}
    )
    before = env.compute.measure_flops
    env.compute.add_measurement(env.model, ("mid",))
    with FlopCounterMode(display=False) as counter:
        env.passes.measure(env.model)
    assert env.compute.measure_flops - before == counter.get_total_flops()


def test_a_static_episode_spends_no_extra_compute() -> None:
    env = make_env(max_epochs=3)
    shares = [env.reset(0).extra_compute_share]
    while not env.episode_over:
        shares.append(env.step(Decision.wait()).signals.extra_compute_share)
    assert shares == [0.0] * 4


def test_the_extra_compute_share_is_what_growth_spent_over_a_static_run() -> None:
    """Epoch by epoch, the share is the training FLOPs beyond the start host's on the same epochs,
    over the start host's whole run: at the end, (grown run - static run) / static run."""
    static = run_episode(make_env(max_epochs=4), StaticController(), rng_seed=0, episode=0)
    env = make_env(max_epochs=4)
    env.reset(0)
    shares = [env.step(Decision(LifecycleOp.GERMINATE, "late", "widen_100")).signals.extra_compute_share]
    while not env.episode_over:
        shares.append(env.step(Decision.wait()).signals.extra_compute_share)
    assert shares == sorted(shares) and shares[0] > 0  # the seed trains from the first epoch
    expected = (env.compute.train_gflops - static.train_gflops) / static.train_gflops
    assert shares[-1] == pytest.approx(expected, rel=1e-9)
