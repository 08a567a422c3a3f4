"""The PPO objective as a composable loss: one clipped surrogate per step on the joint ratio of
its active heads, value loss, entropy."""

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
    """Mean over steps of the k3 estimate of KL(old || new) of the whole action of a step (the
    joint distribution of its active heads), as CleanRL's `approx_kl` is for one head."""
    old_approx_kl: torch.Tensor
    """The same KL by the plain estimator, mean of -log ratio (CleanRL's `old_approx_kl`): it can
    go negative, and beside `approx_kl` shows how noisy the estimate is."""
    clipfrac: torch.Tensor
    """Fraction of steps whose joint ratio lies outside [1 - clip, 1 + clip]."""


@dataclass(frozen=True)
class LossInputs:
    """What the loss reads for B valid steps: per-head tensors (B, H), per-step ones (B,)."""

    new_log_probs: torch.Tensor
    old_log_probs: torch.Tensor
    head_active: torch.Tensor
    entropies: torch.Tensor
    advantages: torch.Tensor
    new_values: torch.Tensor
    old_values: torch.Tensor
    returns: torch.Tensor


def ppo_loss(inputs: LossInputs, config: PPOLossConfig) -> PPOLossOutput:
    """PPO loss for factored actions. Shapes: per-head tensors (B, H); per-step tensors (B,).

    One trust region per step: the ratio is that of the step's whole action, the product of the
    ratios of its active heads (the sum of their log-ratios), and it is clipped once. Clipping
    each head on its own ratio would let a step with four active heads move its joint ratio to
    1.2^4 = 2.07 with no head clipped. A head that did not matter for a step's sampled op
    (`head_active` False, e.g. the blueprint head of a CULL) contributes nothing to that step's
    ratio, entropy, KL or clip fraction.
    """
    x = inputs
    active = x.head_active.bool()
    head_log_ratio = torch.where(active, x.new_log_probs.float() - x.old_log_probs.float(), 0.0)
    log_ratio = head_log_ratio.sum(dim=-1).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    adv = x.advantages.float()
    surrogate = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef))
    policy_loss = surrogate.mean()

    new_values, old_values, returns = x.new_values.float(), x.old_values.float(), x.returns.float()
    if config.clip_vloss:
        clipped = old_values + (new_values - old_values).clamp(-config.clip_coef, config.clip_coef)
        value_loss = 0.5 * torch.maximum((new_values - returns) ** 2, (clipped - returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((new_values - returns) ** 2).mean()

    masked_entropies = torch.where(active, x.entropies.float(), 0.0)
    entropy = masked_entropies.sum() / adv.numel()
    head_entropy = masked_entropies.sum(0) / active.float().sum(0).clamp_min(1.0)
    loss = policy_loss - config.ent_coef * entropy + config.vf_coef * value_loss
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()  # the k3 estimator, per step
        old_approx_kl = (-log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > config.clip_coef).float().mean()
    return PPOLossOutput(loss, policy_loss, value_loss, entropy, head_entropy, approx_kl, old_approx_kl, clipfrac)
