"""The recurrent policy: state resets at episode boundaries, rollout/update consistency, init."""

from __future__ import annotations

import math

import torch

from esper.tamiyo import MaskedCategorical, RecurrentPolicy

HEADS = (4, 3, 6, 2)


def policy(seed: int = 0) -> RecurrentPolicy:
    torch.manual_seed(seed)
    return RecurrentPolicy(obs_dim=10, head_sizes=HEADS, hidden=32, lstm_hidden=16)


def test_state_resets_at_episode_boundaries() -> None:
    net = policy()
    obs = torch.randn(7, 2, 10)
    starts = torch.zeros(7, 2, dtype=torch.bool)
    starts[0] = True
    starts[4, 1] = True  # env 1 starts a new episode at step 4
    logits, values, _ = net(obs, net.initial_state(2), starts)
    # env 1 from step 4 equals a fresh run of its suffix from the zero state
    suffix_logits, suffix_values, _ = net(obs[4:, 1:], net.initial_state(1), starts[4:, 1:])
    torch.testing.assert_close(values[4:, 1:], suffix_values)
    for full, part in zip(logits, suffix_logits, strict=True):
        torch.testing.assert_close(full[4:, 1:], part)
    # env 0 did not reset, so its step 4 depends on what came before
    _, fresh_values, _ = net(obs[4:, :1], net.initial_state(1), starts[4:, :1])
    assert not torch.allclose(values[4:, :1], fresh_values)


def test_stepwise_rollout_equals_the_sequence_the_update_reruns() -> None:
    net = policy()
    obs = torch.randn(5, 3, 10)
    starts = torch.zeros(5, 3, dtype=torch.bool)
    starts[0] = True
    starts[2, 0] = True
    state = net.initial_state(3)
    step_values = []
    for t in range(5):
        _, v, state = net(obs[t : t + 1], state, starts[t : t + 1])
        step_values.append(v)
    _, seq_values, seq_state = net(obs, net.initial_state(3), starts)
    torch.testing.assert_close(torch.cat(step_values), seq_values)
    torch.testing.assert_close(state[0], seq_state[0])


def test_initial_policy_is_near_uniform_and_float32() -> None:
    net = policy()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, values, _ = net(torch.randn(3, 4, 10), net.initial_state(4), torch.ones(3, 4, dtype=torch.bool))
    assert all(lg.dtype == torch.float32 for lg in logits) and values.dtype == torch.float32
    for lg, n in zip(logits, HEADS, strict=True):
        entropy = MaskedCategorical(lg, torch.ones_like(lg, dtype=torch.bool)).entropy()
        assert (entropy > 0.99 * math.log(n)).all()


def test_gradients_reach_every_parameter() -> None:
    net = policy()
    logits, values, _ = net(torch.randn(4, 2, 10), net.initial_state(2), torch.zeros(4, 2, dtype=torch.bool))
    (sum(lg.sum() for lg in logits) + values.sum()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())
