"""The generic PPO core: GAE and the masked categorical distribution."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper.simic import MaskedCategorical, compute_gae


def reference_gae(rewards, values, terminated, truncated, next_values, gamma, lam):
    """By definition: A_t = sum_k (gamma*lam)^k * delta_{t+k}, up to and including the step that
    ends the episode (or the rollout), with delta_t = r_t + gamma * V_next(t) - V_t."""
    steps, envs = len(rewards), len(rewards[0])
    adv = [[0.0] * envs for _ in range(steps)]
    for n in range(envs):
        deltas = []
        for t in range(steps):
            bootstrap = 0.0 if terminated[t][n] else next_values[t][n]
            deltas.append(rewards[t][n] + gamma * bootstrap - values[t][n])
        for t in range(steps):
            total, k = 0.0, 0
            while t + k < steps:
                total += (gamma * lam) ** k * deltas[t + k]
                if terminated[t + k][n] or truncated[t + k][n]:
                    break
                k += 1
            adv[t][n] = total
    return adv


rollouts = st.integers(1, 7).flatmap(
    lambda steps: st.integers(1, 3).flatmap(
        lambda envs: st.tuples(
            *[
                st.lists(st.lists(elem, min_size=envs, max_size=envs), min_size=steps, max_size=steps)
                for elem in (
                    st.floats(-5, 5),
                    st.floats(-5, 5),
                    st.booleans(),
                    st.booleans(),
                    st.floats(-5, 5),
                )
            ]
        )
    )
)


@settings(max_examples=150, deadline=None)
@given(rollouts, st.floats(0, 1), st.floats(0, 1))
def test_gae_equals_the_definition(rollout, gamma, lam) -> None:
    rewards, values, terminated, truncated, next_values = rollout
    adv, ret = compute_gae(
        *(torch.tensor(x, dtype=torch.float64) for x in (rewards, values)),
        torch.tensor(terminated),
        torch.tensor(truncated),
        torch.tensor(next_values, dtype=torch.float64),
        gamma,
        lam,
    )
    expected = torch.tensor(reference_gae(rewards, values, terminated, truncated, next_values, gamma, lam))
    torch.testing.assert_close(adv, expected.float(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ret, adv + torch.tensor(values).float())


def test_terminal_gives_no_bootstrap_and_truncation_does() -> None:
    rewards = torch.tensor([[1.0, 1.0]])
    values = torch.tensor([[0.5, 0.5]])
    next_values = torch.tensor([[10.0, 10.0]])
    adv, _ = compute_gae(
        rewards, values, torch.tensor([[True, False]]), torch.tensor([[False, True]]), next_values, 0.9, 0.95
    )
    assert adv.tolist() == [[pytest.approx(0.5), pytest.approx(1.0 + 9.0 - 0.5)]]


def test_gae_rejects_bad_inputs() -> None:
    z = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="gamma"):
        compute_gae(z, z, z.bool(), z.bool(), z, 1.5, 0.9)
    with pytest.raises(ValueError, match="shape"):
        compute_gae(z, torch.zeros(3, 2), z.bool(), z.bool(), z, 0.9, 0.9)


masks = st.integers(1, 6).flatmap(
    lambda k: st.lists(st.lists(st.booleans(), min_size=k, max_size=k).filter(any), min_size=1, max_size=5)
)


@settings(max_examples=100, deadline=None)
@given(masks, st.integers(0, 2**31 - 1))
def test_masked_actions_are_never_sampled_and_entropy_is_finite(mask_rows, seed) -> None:
    mask = torch.tensor(mask_rows)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(mask.shape, generator=g, dtype=torch.bfloat16) * 20
    dist = MaskedCategorical(logits, mask)
    for _ in range(5):
        actions = dist.sample(generator=g)
        assert bool(mask.gather(1, actions[:, None]).all())
    assert dist.log_probs_all.dtype == torch.float32
    entropy = dist.entropy()
    assert torch.isfinite(entropy).all() and (entropy >= -1e-6).all()
    valid = mask.sum(1).float()
    assert (entropy <= torch.log(valid) + 1e-5).all()
    assert torch.isfinite(dist.log_prob(dist.mode())).all()


def test_uniform_logits_give_uniform_entropy_over_valid_actions() -> None:
    mask = torch.tensor([[True, False, True, True], [False, True, False, False]])
    dist = MaskedCategorical(torch.zeros(2, 4), mask)
    torch.testing.assert_close(dist.entropy(), torch.tensor([math.log(3), 0.0]))
    torch.testing.assert_close(dist.log_prob(torch.tensor([2, 1])), torch.tensor([-math.log(3), 0.0]))


def test_a_row_with_no_valid_action_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one valid action"):
        MaskedCategorical(torch.zeros(2, 3), torch.tensor([[True, False, False], [False, False, False]]))
