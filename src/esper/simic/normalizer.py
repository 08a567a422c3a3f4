"""Running mean and variance of observations (Welford / Chan's parallel update)."""

from __future__ import annotations

import torch


class RunningMeanStd:
    """Per-feature running statistics, merged batch by batch with Chan et al.'s parallel
    formula (numerically stable, exact for any batch split). Kept in float64."""

    def __init__(self, dim: int, epsilon: float = 1e-8, clip: float = 10.0) -> None:
        self.mean = torch.zeros(dim, dtype=torch.float64)
        self.var = torch.ones(dim, dtype=torch.float64)
        self.count = 0
        self.epsilon, self.clip = epsilon, clip

    def update(self, batch: torch.Tensor) -> None:
        batch = batch.detach().to(torch.float64).reshape(-1, self.mean.numel()).cpu()
        if batch.shape[0] == 0:
            return
        self.merge(batch.shape[0], batch.mean(0), batch.var(0, unbiased=False))

    def merge(self, n: int, batch_mean: torch.Tensor, batch_var: torch.Tensor) -> None:
        """Fold in the statistics of `n` samples (mean and population variance)."""
        if n == 0:
            return
        batch_mean, batch_var = batch_mean.to(torch.float64).cpu(), batch_var.to(torch.float64).cpu()
        if self.count == 0:
            self.mean, self.var, self.count = batch_mean.clone(), batch_var.clone(), n
            return
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta.square() * self.count * n / total
        self.mean = self.mean + delta * n / total
        self.var = m2 / total
        self.count = total

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """(obs - mean) / std, clipped to +-clip, in the dtype and on the device of `obs`."""
        mean = self.mean.to(device=obs.device, dtype=obs.dtype)
        std = (self.var + self.epsilon).sqrt().to(device=obs.device, dtype=obs.dtype)
        return ((obs - mean) / std).clamp(-self.clip, self.clip)

    def state_dict(self) -> dict[str, torch.Tensor | int | float]:
        return {
            "mean": self.mean.clone(),
            "var": self.var.clone(),
            "count": self.count,
            "epsilon": self.epsilon,
            "clip": self.clip,
        }

    def load_state_dict(self, state: dict) -> None:
        if state["mean"].numel() != self.mean.numel():
            raise ValueError(f"normalizer state has {state['mean'].numel()} features, expected {self.mean.numel()}")
        self.mean, self.var = state["mean"].clone().double(), state["var"].clone().double()
        self.count, self.epsilon, self.clip = int(state["count"]), float(state["epsilon"]), float(state["clip"])
