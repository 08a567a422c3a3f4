"""One GPU: per-env streams, AMP bf16 and fp16, and torch.compile on CUDA. Skipped without CUDA."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))
from conftest import make_env
from esper.leyline import Decision, LifecycleOp

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

CUDA = torch.device("cuda:0")


def run_episode(env, germinate_at: int = 1) -> list[float]:
    env.reset(0)
    losses = []
    for epoch in range(env.config.max_epochs):
        decision = Decision(LifecycleOp.GERMINATE, "mid", "conv_light") if epoch == germinate_at else Decision.wait()
        result = env.step(decision)
        losses.append(result.signals.train_loss)
    return losses


def test_each_env_owns_a_stream_and_trains_finite_with_a_seed() -> None:
    a, b = make_env(max_epochs=4, device=CUDA), make_env(max_epochs=4, device=CUDA)
    assert a.passes.stream is not None and a.passes.stream != b.passes.stream
    gpu = run_episode(a)
    assert all(math.isfinite(x) for x in gpu)
    assert a.model.slot("mid").seed is not None and next(a.model.parameters()).is_cuda


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_amp_episode_is_finite_and_keeps_fp32_weights(amp: str) -> None:
    env = make_env(max_epochs=5, device=CUDA, amp=amp)
    losses = run_episode(env)
    assert all(math.isfinite(x) for x in losses)
    assert all(p.dtype == torch.float32 for p in env.model.parameters())
    assert (env.scaler is not None) == (amp == "fp16")


def test_compile_on_cuda_does_not_recompile_in_steady_state() -> None:
    torch._dynamo.reset()
    compilations = []

    def backend(gm, example_inputs):
        compilations.append(1)
        return gm.forward

    env = make_env(max_epochs=4, device=CUDA, compile_backend=backend)
    env.reset(0)
    env.step(Decision.wait())
    first = len(compilations)
    env.step(Decision.wait())
    env.step(Decision.wait())
    assert len(compilations) == first


def test_policy_logits_stay_float32_under_autocast() -> None:
    from esper.tamiyo import MaskedCategorical, RecurrentPolicy

    policy = RecurrentPolicy(8, (4, 3)).to(CUDA)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits, values, _ = policy(
            torch.randn(1, 2, 8, device=CUDA), policy.initial_state(2), torch.ones(1, 2, dtype=torch.bool, device=CUDA)
        )
    assert all(lg.dtype == torch.float32 for lg in logits) and values.dtype == torch.float32
    dist = MaskedCategorical(logits[0][0].bfloat16(), torch.ones(2, 4, dtype=torch.bool, device=CUDA))
    assert dist.log_probs_all.dtype == torch.float32


def test_training_accumulators_are_created_on_the_env_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The epoch's running sums are zeroed on the stream that updates them, so no other stream's
    zero-fill can race the first update."""
    from esper.tolaria import environment, training

    streams = []
    original = training.TrainingEpoch.__init__

    def recording_init(self, *args, **kwargs):
        streams.append(torch.cuda.current_stream(CUDA))
        original(self, *args, **kwargs)

    monkeypatch.setattr(environment.TrainingEpoch, "__init__", recording_init)
    env = make_env(max_epochs=2, device=CUDA)
    env.reset(0)
    env.step(Decision.wait())
    assert streams == [env.passes.stream]


def test_the_counterfactual_on_cuda_equals_the_one_on_cpu() -> None:
    """The fused measurement (BatchNorm statistics recomputed per arm) on the env's stream gives
    the CPU's numbers."""
    results = []
    for device in (torch.device("cpu"), CUDA):
        env = make_env(max_epochs=8, device=device)
        env.reset(0)
        env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
        while env.model.slot("mid").alpha == 0.0 or env.signals.slot("mid").contribution is None:
            env.step(Decision.wait())
        results.append((env.signals.val_accuracy, env.signals.slot("mid").contribution))
    (cpu_acc, cpu_contribution), (gpu_acc, gpu_contribution) = results
    assert abs(cpu_acc - gpu_acc) <= 2.0 and abs(cpu_contribution - gpu_contribution) <= 2.0
