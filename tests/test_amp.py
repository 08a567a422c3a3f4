"""Mixed precision: autocast passes, one GradScaler per env, dtype-safe straight-through.

The command line accepts `--amp` only for CUDA hosts; the mechanics are checked here on the CPU,
where autocast also runs (bf16), so they are tested on every machine.
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import make_env
from esper.kasmina.isolation import straight_through
from esper.leyline import Decision, LifecycleOp


def test_each_fp16_env_owns_its_scaler_and_bf16_needs_none() -> None:
    a, b = make_env(amp="fp16"), make_env(amp="fp16")
    a.reset(0)
    b.reset(0)
    assert isinstance(a.scaler, torch.amp.GradScaler) and a.scaler is not b.scaler
    first = a.scaler
    a.reset(1)
    assert a.scaler is not first  # a new episode never inherits a loss scale
    bf16, fp32 = make_env(amp="bf16"), make_env()
    bf16.reset(0)
    fp32.reset(0)
    assert bf16.scaler is None and fp32.scaler is None


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown amp precision 'fp8'; choose from: bf16 fp16"):
        make_env(amp="fp8")


def test_bf16_episode_trains_a_seed_through_the_straight_through_path() -> None:
    env = make_env(max_epochs=3, amp="bf16")
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    before = [p.clone() for p in env.model.slot("mid").seed.parameters()]
    result = env.step(Decision.wait())
    assert math.isfinite(result.signals.train_loss) and result.signals.slot("mid").grad_norm > 0
    after = list(env.model.slot("mid").seed.parameters())
    assert any(not torch.equal(x, y) for x, y in zip(before, after, strict=True))
    assert all(p.dtype == torch.float32 for p in env.model.parameters())  # autocast never casts the weights


def test_straight_through_returns_each_input_its_own_dtype() -> None:
    host = torch.randn(4, requires_grad=True)
    seed = torch.randn(4, dtype=torch.bfloat16, requires_grad=True)
    out = straight_through(host, seed)
    assert out.dtype == torch.float32 and torch.equal(out, host)
    out.sum().backward()
    assert seed.grad.dtype == torch.bfloat16 and host.grad.dtype == torch.float32


def test_fp16_scaler_path_steps_and_reads_unscaled_gradients() -> None:
    env = make_env(max_epochs=3, amp="fp16")
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "early", "conv_light"))
    result = env.step(Decision.wait())
    grad = result.signals.slot("early").grad_norm
    assert math.isfinite(result.signals.train_loss)
    assert grad is not None and 0 < grad < 1e3  # unscaled: the scale (2**16) would show here
    assert env.scaler.get_scale() > 0


def test_validation_under_autocast_leaves_no_cast_cache_for_training() -> None:
    """A no-grad validation pass in its own autocast context, then a training pass: the training
    forward must build its graph from fresh casts (a stale cache would give no weight gradient)."""
    env = make_env(max_epochs=3, amp="bf16")
    env.reset(0)
    env.passes.measure(env.model)
    first = next(env.model.host.parameters())
    x, y = next(env.passes.data.train_batches(env.config.task.batch_size, torch.Generator().manual_seed(0)))
    env.begin_step(Decision.wait())
    env.train_batch(x, y)
    assert first.grad is not None and torch.isfinite(first.grad).all() and first.grad.abs().sum() > 0
    env.abort_step()
