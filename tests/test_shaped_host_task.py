"""The grown-shape task: its static host has, layer by layer, the shape that the growth schedule's
merged seeds give the width-8 host, so "the same final architecture" is meant literally."""

from __future__ import annotations

import pytest
import torch

from conftest import EXPERIMENTS, load_benchmark, make_env
from esper.leyline import Decision, GateThresholds, LifecycleOp, SeedStage

shaped = load_benchmark("shaped_host_task", EXPERIMENTS / "growth-frontier")


def test_a_shaped_host_has_the_layers_of_a_host_grown_to_that_shape() -> None:
    """The tiny task's width-4 host (blocks 4, 8, 16) with `early` widen_50 and `late` widen_25
    merged has blocks 6, 8, 20: the shaped host of those widths has every tensor's shape."""
    keep_all = GateThresholds(
        min_training_epochs=1, blend_epochs=1, fossilize_min_contribution=-100.0, probation_cull_contribution=-100.0
    )
    env = make_env(max_epochs=6, thresholds=keep_all)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "early", "widen_50"))
    env.step(Decision(LifecycleOp.GERMINATE, "late", "widen_25"))
    while not env.episode_over:
        ready = [s for s in ("early", "late") if env.model.slot(s).lifecycle.gate_fossilize(contribution=1.0).passed]
        env.step(Decision(LifecycleOp.FOSSILIZE, ready[0]) if ready else Decision.wait())
    assert all(env.model.slot(s).stage is SeedStage.FOSSILIZED for s in ("early", "late"))
    grown, static = env.model.host.state_dict(), shaped.ShapedCNNHost((6, 8, 20)).state_dict()
    assert grown.keys() == static.keys()
    for name, tensor in static.items():  # each block's extra state is a dict of its widths
        assert (tensor.shape == grown[name].shape) if torch.is_tensor(tensor) else (tensor == grown[name]), name


def test_the_task_is_shapes_with_the_schedules_final_shape_and_refuses_other_widths() -> None:
    task = shaped.shapes_12_16_40()
    host = task.build_host()
    assert (task.name, task.max_epochs) == ("shapes", 40)
    assert sum(p.numel() for p in host.parameters()) == 26_494  # the schedule's final size in its eval
    assert host.slot_dims == (12, 16, 40)
    assert host(torch.randn(2, 3, 16, 16)).shape == (2, 10)
    with pytest.raises(ValueError, match="width 10 is not its own"):
        task.build_host(10)


def test_the_v24p_shape_task_has_its_26126_parameters_and_refuses_other_widths() -> None:
    task = shaped.shapes_12_24_32()
    host = task.build_host()
    assert sum(p.numel() for p in host.parameters()) == 26_126  # the schedule's and v24p's kept shape
    assert host.slot_dims == (12, 24, 32)
    with pytest.raises(ValueError, match=r"shapes_12_24_32 has one shape, blocks \(12, 24, 32\); width 9"):
        task.build_host(9)
