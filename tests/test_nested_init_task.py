"""The nested-initialisation pilot's task: a wider host's draws extend a narrower one's, each
layer keeps PyTorch's default law, and the task is shapes otherwise."""

from __future__ import annotations

import math

import torch

from conftest import EXPERIMENTS, load_benchmark

nested = load_benchmark("nested_init_task", EXPERIMENTS / "growth-frontier")


def _host(width: int, seed: int = 7) -> torch.nn.Module:
    torch.manual_seed(seed)
    return nested._nested_host(width)


def test_a_wider_host_extends_the_narrower_hosts_draws() -> None:
    narrow, wide = _host(8), _host(10)
    for (name, a), (_, b) in zip(narrow.named_parameters(), wide.named_parameters(), strict=True):
        if a.dim() < 2:
            continue  # BatchNorm's constants; the classifier's bias is drawn alike (below)
        rows, cols = a.shape[0], a.shape[1]
        scale = math.sqrt(b[0].numel() / a[0].numel())  # each layer's bound is 1/sqrt(fan_in)
        assert torch.allclose(a * (1 / scale), b[:rows, :cols], atol=1e-7), name
    assert torch.allclose(narrow.segments[-1][2].bias * math.sqrt(32), wide.segments[-1][2].bias * math.sqrt(40))


def test_each_layer_keeps_the_default_bound_and_seeds_differ() -> None:
    host = _host(8)
    for module in host.modules():
        if isinstance(module, torch.nn.Conv2d):
            bound = 1 / math.sqrt(module.weight[0].numel())
            assert module.weight.abs().max() <= bound
            assert module.weight.abs().max() > 0.9 * bound  # uniform over the whole range
    assert not torch.equal(_host(8, seed=7).segments[0][0].weight, _host(8, seed=8).segments[0][0].weight)


def test_the_task_is_shapes_with_the_nested_host() -> None:
    task = nested.shapes_nested()
    assert (task.name, task.host_width, task.max_epochs) == ("shapes", 8, 40)
    assert sum(p.numel() for p in task.build_host(8).parameters()) == 18_626
