"""Generalised advantage estimation over per-env segments, with explicit episode ends."""

from __future__ import annotations

import torch


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    next_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns for a rollout laid out as (T steps, N envs).

    `next_values[t]` is V of the observation after step t: the value of the next stored step
    within an episode, and V(final observation) at a truncation. The two kinds of episode end
    are handled differently:
    - `terminated[t]`: a true terminal; nothing follows, so the bootstrap is 0.
    - `truncated[t]`: the episode was cut (time limit, or the rollout ends mid-episode); the
      return bootstraps from `next_values[t]`, V of the state the env actually reached.
    Either end stops the lambda-recursion, so no advantage leaks across episodes.
    """
    if not 0.0 <= gamma <= 1.0 or not 0.0 <= gae_lambda <= 1.0:
        raise ValueError(f"gamma and gae_lambda must be in [0, 1], got {gamma}, {gae_lambda}")
    shapes = {t.shape for t in (rewards, values, terminated, truncated, next_values)}
    if len(shapes) != 1 or rewards.dim() != 2:
        raise ValueError(f"all inputs must share one (T, N) shape, got {sorted(shapes)}")
    rewards, values, next_values = rewards.float(), values.float(), next_values.float()
    terminated, truncated = terminated.bool(), truncated.bool()
    bootstrap = torch.where(terminated, torch.zeros_like(next_values), next_values)
    deltas = rewards + gamma * bootstrap - values
    carry = (~(terminated | truncated)).float() * (gamma * gae_lambda)
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + carry[t] * running
        advantages[t] = running
    return advantages, advantages + values
