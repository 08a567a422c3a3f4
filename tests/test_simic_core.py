"""The generic PPO core: GAE and the masked categorical distribution."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper.simic import PPOLossConfig, compute_gae, ppo_loss
from esper.simic.loss import LossInputs
from esper.tamiyo import MaskedCategorical


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


def loss_inputs(batch: int = 6, heads: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    new = torch.randn(batch, heads, generator=g, requires_grad=True)
    old = new.detach() + 0.1 * torch.randn(batch, heads, generator=g)
    active = torch.rand(batch, heads, generator=g) > 0.4
    entropies = torch.rand(batch, heads, generator=g, requires_grad=True)
    adv = torch.randn(batch, generator=g)
    values = torch.randn(batch, generator=g, requires_grad=True)
    return new, old, active, entropies, adv, values, values.detach() + 0.1, torch.randn(batch, generator=g)


def test_inactive_heads_contribute_nothing() -> None:
    new, old, active, entropies, adv, values, old_values, returns = loss_inputs()
    out = ppo_loss(LossInputs(new, old, active, entropies, adv, values, old_values, returns), PPOLossConfig())
    out.loss.backward()
    assert torch.all(new.grad[~active] == 0) and torch.all(entropies.grad[~active] == 0)
    assert torch.any(new.grad[active] != 0)
    # changing an inactive head's log-probs changes nothing
    shifted = new.detach().clone()
    shifted[~active] += 50.0
    again = ppo_loss(
        LossInputs(shifted, old, active, entropies.detach(), adv, values.detach(), old_values, returns), PPOLossConfig()
    )
    torch.testing.assert_close(again.loss, out.loss.detach())
    torch.testing.assert_close(again.approx_kl, out.approx_kl)


def test_at_the_old_policy_the_surrogate_is_minus_the_advantage() -> None:
    new, _, active, entropies, adv, values, old_values, returns = loss_inputs()
    out = ppo_loss(LossInputs(new, new.detach(), active, entropies, adv, values, old_values, returns), PPOLossConfig())
    torch.testing.assert_close(out.policy_loss, -adv.mean())
    assert out.approx_kl.item() == pytest.approx(0.0, abs=1e-7) and out.clipfrac.item() == 0.0


def test_one_trust_region_per_step_on_the_joint_ratio_of_its_active_heads() -> None:
    """Step 0: four active heads, each moved by a ratio of 1.15. No head alone leaves [0.8, 1.2],
    but the step's action did: its joint ratio is 1.15^4 = 1.749, so it is clipped. Step 1: one
    active head at 1.1 (the others, inactive, moved wildly and count for nothing): not clipped."""
    per_head = math.log(1.15)
    old = torch.zeros(2, 4)
    new = torch.tensor([[per_head] * 4, [math.log(1.1), 9.0, -9.0, 9.0]], requires_grad=True)
    active = torch.tensor([[True] * 4, [True, False, False, False]])
    adv = torch.tensor([1.0, 1.0])
    values = torch.zeros(2, requires_grad=True)
    entropies = torch.zeros(2, 4)
    out = ppo_loss(
        LossInputs(new, old, active, entropies, adv, values, values.detach(), torch.zeros(2)), PPOLossConfig()
    )
    joint = 1.15**4
    # step 0 is clipped at 1 + 0.2 (no gradient), step 1 is not
    torch.testing.assert_close(out.policy_loss, torch.tensor(-(1.2 + 1.1) / 2))
    out.policy_loss.backward()
    assert torch.all(new.grad[0] == 0) and new.grad[1, 0] != 0 and torch.all(new.grad[1, 1:] == 0)
    # per-step k3 KL and clip fraction, as their names say
    expected_kl = ((joint - 1 - math.log(joint)) + (0.1 - math.log(1.1))) / 2
    assert out.approx_kl.item() == pytest.approx(expected_kl, rel=1e-5)
    assert out.clipfrac.item() == pytest.approx(0.5)


def test_huge_log_ratios_stay_finite() -> None:
    new, old, active, entropies, adv, values, old_values, returns = loss_inputs()
    out = ppo_loss(LossInputs(new + 500.0, old, active, entropies, adv, values, old_values, returns), PPOLossConfig())
    assert all(torch.isfinite(t).all() for t in (out.loss, out.approx_kl, out.clipfrac))
    out.loss.backward()
    assert torch.isfinite(new.grad).all()


def test_value_clipping_is_optional() -> None:
    new, old, active, entropies, adv, values, _, returns = loss_inputs()
    far_old = values.detach() + 5.0
    plain = ppo_loss(LossInputs(new, old, active, entropies, adv, values, far_old, returns), PPOLossConfig())
    clipped = ppo_loss(
        LossInputs(new, old, active, entropies, adv, values, far_old, returns), PPOLossConfig(clip_vloss=True)
    )
    torch.testing.assert_close(plain.value_loss, 0.5 * ((values - returns) ** 2).mean())
    assert clipped.value_loss.item() > plain.value_loss.item()
