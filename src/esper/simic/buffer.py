"""The rollout buffer: one segment per env, laid out (T steps, N envs), for a recurrent policy.

Each env writes its own column at its own pace, so an env whose episode ended early (a governor
panic) simply stops writing: the rest of its column is padding, marked invalid, and never
reaches a distribution, a loss or a statistic. The LSTM state each segment started from is
stored, so the update re-runs every sequence exactly as the rollout ran it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from esper.simic.advantages import compute_gae
from esper.tamiyo.distributions import FactoredSample
from esper.tamiyo.policy import LSTMState


@dataclass(frozen=True)
class RolloutStep:
    """One step of K envs, as the buffer stores it: what they saw, what they did, what followed.
    Per-step tensors are (K,); per-head ones (K, H)."""

    envs: torch.Tensor
    """(K,) which envs took this step."""
    obs: torch.Tensor
    """(K, obs_dim) the normalized observation the policy acted on."""
    episode_start: torch.Tensor
    actions: torch.Tensor
    masks: torch.Tensor
    """(K, n0 + n1 + ...) the resolved mask of every head."""
    log_probs: torch.Tensor
    head_active: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    bootstrap_values: torch.Tensor | None = None
    """V of the final observation at a truncation; unused elsewhere."""

    @staticmethod
    def of(
        envs: torch.Tensor,
        obs: torch.Tensor,
        episode_start: torch.Tensor,
        sample: FactoredSample,
        values: torch.Tensor,
        rewards: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        bootstrap_values: torch.Tensor | None = None,
    ) -> RolloutStep:
        """The step of a policy's sampled actions."""
        return RolloutStep(
            envs,
            obs,
            episode_start,
            sample.actions,
            sample.masks,
            sample.log_probs,
            sample.head_active,
            values,
            rewards,
            terminated,
            truncated,
            bootstrap_values,
        )


STORED_FIELDS: tuple[str, ...] = tuple(
    f for f in RolloutStep.__dataclass_fields__ if f not in ("envs", "bootstrap_values")
)
"""The per-step fields of a `RolloutStep` the buffer keeps a (T, N, ...) tensor of."""


@dataclass(frozen=True)
class Minibatch:
    """Whole env sequences (T, B, ...) and, flattened, their valid steps."""

    obs: torch.Tensor
    episode_start: torch.Tensor
    initial_state: LSTMState
    valid: torch.Tensor
    """(T, B) bool."""
    actions: torch.Tensor
    masks: torch.Tensor
    old_log_probs: torch.Tensor
    head_active: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    """Per-step fields above are (V, ...) over the V valid steps, in (t, b) order."""


class RolloutBuffer:
    def __init__(
        self,
        n_steps: int,
        n_envs: int,
        obs_dim: int,
        head_sizes: tuple[int, ...],
        initial_state: LSTMState,
        device: torch.device | None = None,
    ) -> None:
        T, N, H = n_steps, n_envs, len(head_sizes)
        self.n_steps, self.n_envs, self.head_sizes = T, N, tuple(head_sizes)
        zeros = dict(device=device)
        self.obs = torch.zeros(T, N, obs_dim, **zeros)
        self.episode_start = torch.zeros(T, N, dtype=torch.bool, **zeros)
        self.actions = torch.zeros(T, N, H, dtype=torch.long, **zeros)
        self.masks = torch.ones(T, N, sum(head_sizes), dtype=torch.bool, **zeros)
        self.log_probs = torch.zeros(T, N, H, **zeros)
        self.head_active = torch.zeros(T, N, H, dtype=torch.bool, **zeros)
        self.values = torch.zeros(T, N, **zeros)
        self.rewards = torch.zeros(T, N, **zeros)
        self.terminated = torch.zeros(T, N, dtype=torch.bool, **zeros)
        self.truncated = torch.zeros(T, N, dtype=torch.bool, **zeros)
        self.bootstrap_values = torch.zeros(T, N, **zeros)
        """V of the final observation at a truncation; unused elsewhere."""
        self.valid = torch.zeros(T, N, dtype=torch.bool, **zeros)
        self.initial_state = (initial_state[0].detach().clone(), initial_state[1].detach().clone())
        self.steps = torch.zeros(N, dtype=torch.long)
        self.advantages: torch.Tensor | None = None
        self.returns: torch.Tensor | None = None

    def add(self, step: RolloutStep) -> None:
        """Append one step for each of the step's envs (`step.obs` must be the exact normalized
        observation the policy acted on)."""
        envs = step.envs.long().cpu()
        t = self.steps[envs]
        if bool((t >= self.n_steps).any()):
            raise IndexError(f"env segment full ({self.n_steps} steps)")
        if envs.unique().numel() != envs.numel():
            raise ValueError("an env appears twice in one add()")
        for name in STORED_FIELDS:
            target = getattr(self, name)
            target[t, envs] = getattr(step, name).detach().to(device=target.device, dtype=target.dtype)
        if step.bootstrap_values is not None:
            self.bootstrap_values[t, envs] = step.bootstrap_values.detach().to(self.bootstrap_values)
        self.valid[t, envs] = True
        self.steps[envs] += 1

    def compute_returns(self, last_values: torch.Tensor, gamma: float, gae_lambda: float) -> None:
        """GAE over each env's segment. `last_values` (N,) is V of the observation after each
        env's last stored step, used when the segment ends mid-episode (the rollout was cut)."""
        next_values = torch.zeros_like(self.values)
        next_values[:-1] = self.values[1:]
        truncated = self.truncated.clone()
        next_values = torch.where(self.truncated, self.bootstrap_values, next_values)
        ends = self.terminated | self.truncated
        for env in range(self.n_envs):
            n = int(self.steps[env])
            if n == 0:
                continue
            last = n - 1
            if not bool(ends[last, env]):
                # The rollout stopped mid-episode: bootstrap from V of where the env stands.
                truncated[last, env] = True
                next_values[last, env] = last_values[env].to(next_values)
        advantages, returns = compute_gae(
            self.rewards, self.values, self.terminated, truncated, next_values, gamma, gae_lambda
        )
        self.advantages = torch.where(self.valid, advantages, torch.zeros_like(advantages))
        self.returns = torch.where(self.valid, returns, torch.zeros_like(returns))

    def minibatches(self, n_minibatches: int, generator: torch.Generator) -> Iterator[Minibatch]:
        """Shuffled groups of whole env sequences (envs with no step are left out)."""
        if self.advantages is None or self.returns is None:
            raise RuntimeError("compute_returns() before minibatches()")
        filled = torch.nonzero(self.steps > 0).flatten()
        order = filled[torch.randperm(filled.numel(), generator=generator)]
        for group in order.tensor_split(min(n_minibatches, max(order.numel(), 1))):
            if group.numel() == 0:
                continue
            idx = group.to(self.obs.device)
            valid = self.valid[:, idx]

            def flat(x: torch.Tensor, idx: torch.Tensor = idx, valid: torch.Tensor = valid) -> torch.Tensor:
                return x[:, idx][valid]

            yield Minibatch(
                obs=self.obs[:, idx],
                episode_start=self.episode_start[:, idx],
                initial_state=(self.initial_state[0][:, idx], self.initial_state[1][:, idx]),
                valid=valid,
                actions=flat(self.actions),
                masks=flat(self.masks),
                old_log_probs=flat(self.log_probs),
                head_active=flat(self.head_active),
                old_values=flat(self.values),
                advantages=flat(self.advantages),
                returns=flat(self.returns),
            )

    def explained_variance(self) -> float:
        """1 - Var(returns - values) / Var(returns) over valid steps; 0 when the returns are
        constant (nothing to explain), so the metric is always finite."""
        if self.returns is None:
            raise RuntimeError("compute_returns() before explained_variance()")
        y, v = self.returns[self.valid].double(), self.values[self.valid].double()
        var_y = y.var(unbiased=False)
        if y.numel() < 2 or float(var_y) == 0.0:
            return 0.0
        return float(1.0 - (y - v).var(unbiased=False) / var_y)
