"""The PPO objective as a composable loss: per-head clipped surrogates, value loss, entropy."""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOG_RATIO_CLAMP = 20.0
"""|log pi_new - log pi_old| is clamped to this before `exp`: e^20 is finite in float32, and a
ratio that large is clipped by the surrogate anyway, so the clamp only prevents inf/NaN."""


@dataclass(frozen=True)
class PPOLossConfig:
    clip_coef: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    clip_vloss: bool = False
    """Clip the value loss around the old values (off by default: it often hurts, see Andrychowicz et al. 2021)."""


@dataclass(frozen=True)
class PPOLossOutput:
    loss: torch.Tensor
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    """Mean over the batch of the summed entropy of the active heads."""
    head_entropy: torch.Tensor
    """(H,) mean entropy of each head over the steps where it was active."""
    approx_kl: torch.Tensor
    clipfrac: torch.Tensor


def ppo_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    head_active: torch.Tensor,
    entropies: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    config: PPOLossConfig,
) -> PPOLossOutput:
    """PPO loss for factored actions. Shapes: per-head tensors (B, H); per-step tensors (B,).

    Each head has its own ratio and clipped surrogate, all weighted by the step's advantage.
    A head that did not matter for a step's sampled op (`head_active` False, e.g. the blueprint
    head of a CULL) contributes nothing to that step's policy loss, entropy, KL or clip fraction.
    """
    active = head_active.float()
    n_active = active.sum().clamp_min(1.0)
    log_ratio = (new_logprobs.float() - old_logprobs.float()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    adv = advantages.float().unsqueeze(-1)
    surrogate = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef))
    policy_loss = (surrogate * active).sum() / advantages.numel()

    new_values, returns = new_values.float(), returns.float()
    if config.clip_vloss:
        clipped = old_values + (new_values - old_values).clamp(-config.clip_coef, config.clip_coef)
        value_loss = 0.5 * torch.maximum((new_values - returns) ** 2, (clipped - returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((new_values - returns) ** 2).mean()

    entropy = (entropies.float() * active).sum() / advantages.numel()
    head_entropy = (entropies.float() * active).sum(0) / active.sum(0).clamp_min(1.0)
    loss = policy_loss - config.ent_coef * entropy + config.vf_coef * value_loss
    with torch.no_grad():
        approx_kl = (((ratio - 1) - log_ratio) * active).sum() / n_active  # the k3 estimator
        clipfrac = (((ratio - 1).abs() > config.clip_coef).float() * active).sum() / n_active
    return PPOLossOutput(loss, policy_loss, value_loss, entropy, head_entropy, approx_kl, clipfrac)
