"""A categorical distribution over masked logits, computed in float32."""

from __future__ import annotations

import torch


class MaskedCategorical:
    """Categorical over the valid actions of each row.

    Logits are cast to float32 before masking (under autocast they may arrive in bf16/fp16, where
    the mask value and the log-softmax lose precision). Invalid actions get the most negative
    float32, so their probability is exactly 0 and they are never sampled; entropy sums over
    valid actions only, so a masked action never turns `0 * -inf` into NaN.
    """

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor) -> None:
        if logits.shape != mask.shape:
            raise ValueError(f"logits {tuple(logits.shape)} and mask {tuple(mask.shape)} differ in shape")
        mask = mask.bool()
        if not bool(mask.any(dim=-1).all()):
            raise ValueError("every row of an action mask needs at least one valid action")
        self.mask = mask
        masked = logits.float().masked_fill(~mask, torch.finfo(torch.float32).min)
        self.log_probs_all = torch.log_softmax(masked, dim=-1)

    def sample(self, generator: torch.Generator | None = None, uniforms: torch.Tensor | None = None) -> torch.Tensor:
        """Draw one action per row, by inverting the CDF at `uniforms` (one U[0, 1) per row) or
        at fresh draws from `generator`. Given uniforms, a row's action depends on that row
        alone, so which other rows are sampled alongside it never changes it."""
        probs = self.log_probs_all.exp()
        if uniforms is None:
            uniforms = torch.rand(probs.shape[:-1], generator=generator, device=probs.device)
        cdf = probs.cumsum(dim=-1)
        cdf = cdf / cdf[..., -1:]  # the last entry is exactly 1, so every u < 1 lands in range
        index = torch.searchsorted(cdf, uniforms.to(cdf).contiguous().unsqueeze(-1), right=True).squeeze(-1)
        return index.clamp_max(probs.shape[-1] - 1)

    def mode(self) -> torch.Tensor:
        return self.log_probs_all.argmax(dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.log_probs_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        p_logp = self.log_probs_all.exp() * self.log_probs_all
        return -torch.where(self.mask, p_logp, torch.zeros_like(p_logp)).sum(dim=-1)
