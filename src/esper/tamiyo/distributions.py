"""The policy's action distributions: a categorical over masked logits (in float32), and
factored actions whose first head conditions the masks of the rest.

A discrete action space is one head; a multi-discrete one is several. Masks may make a later
head depend on the first head's choice (a lifecycle op decides which slots are valid), so each
later head's mask is given per first-head choice, or per choice of the first two heads (which
blueprints fit a compute budget depends on the slot), and the mask actually used is resolved
once the heads it depends on are sampled. The resolved masks are what the rollout buffer stores: the update
rebuilds exactly the distributions the rollout sampled from.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class FactoredMasks:
    """Masks for N rows of an action with heads of sizes (n0, n1, ...)."""

    first: torch.Tensor
    """(N, n0) bool: valid choices of the first head."""
    conditional: tuple[torch.Tensor, ...]
    """One bool tensor per later head: its valid choices given each first-head choice (N, n0, nk),
    or, for a head after the second, given each choice of the first two (N, n0, n1, nk)."""
    head_active: torch.Tensor
    """(n0, H) bool: which heads matter for each first-head choice (the first always does)."""

    @staticmethod
    def unmasked(n_rows: int, head_sizes: tuple[int, ...], device: torch.device | None = None) -> FactoredMasks:
        """Every choice valid and every head active: a plain (multi-)discrete action space."""
        n0 = head_sizes[0]
        return FactoredMasks(
            first=torch.ones(n_rows, n0, dtype=torch.bool, device=device),
            conditional=tuple(torch.ones(n_rows, n0, n, dtype=torch.bool, device=device) for n in head_sizes[1:]),
            head_active=torch.ones(n0, len(head_sizes), dtype=torch.bool, device=device),
        )


@dataclass(frozen=True)
class FactoredSample:
    actions: torch.Tensor
    """(N, H) int64: one choice per head (an inactive head's choice is sampled but ignored)."""
    log_probs: torch.Tensor
    """(N, H) float32 log-probabilities of each head's choice."""
    entropies: torch.Tensor
    """(N, H) float32 entropy of each head's distribution."""
    head_active: torch.Tensor
    """(N, H) bool."""
    masks: torch.Tensor
    """(N, n0 + n1 + ...) bool: the resolved mask of every head, concatenated."""
    pair_probs: torch.Tensor | None
    """(N, n0, n1) float32: the probability of each (first head, second head) choice under the
    masks (for the morphogenetic heads: of each op on each slot), whichever was chosen; None for
    a single head."""


def sample_factored(
    logits: list[torch.Tensor],
    masks: FactoredMasks,
    generator: torch.Generator | None = None,
    uniforms: torch.Tensor | None = None,
    greedy: bool = False,
) -> FactoredSample:
    """Sample the first head, then every later head under its mask for that choice; `greedy`
    takes each head's most probable valid choice instead.

    `uniforms` (N, H), one U[0, 1) per row and head, makes each row's sample depend on its own
    row only (see `MaskedCategorical.sample`); without it they are drawn from `generator`."""
    if uniforms is None and not greedy:
        uniforms = torch.rand(logits[0].shape[0], len(logits), generator=generator, device=logits[0].device)

    def choose(dist: MaskedCategorical, head: int) -> torch.Tensor:
        return dist.mode() if greedy else dist.sample(uniforms=uniforms[:, head])

    first_dist = MaskedCategorical(logits[0], masks.first)
    chosen = [choose(first_dist, 0)]
    rows = torch.arange(chosen[0].shape[0], device=chosen[0].device)
    dists, resolved = [first_dist], [masks.first]
    for k, (head_logits, conditional) in enumerate(zip(logits[1:], masks.conditional, strict=True), start=1):
        mask = resolve_mask(conditional, rows, chosen)
        dists.append(MaskedCategorical(head_logits, mask))
        resolved.append(mask)
        chosen.append(choose(dists[-1], k))
    first = chosen[0]
    actions = torch.stack(chosen, dim=-1)
    log_probs = torch.stack([d.log_prob(actions[:, k]) for k, d in enumerate(dists)], dim=-1)
    entropies = torch.stack([d.entropy() for d in dists], dim=-1)
    pairs = first_two_probabilities(first_dist, logits[1], masks.conditional[0]) if len(logits) > 1 else None
    return FactoredSample(actions, log_probs, entropies, masks.head_active[first], torch.cat(resolved, dim=-1), pairs)


def resolve_mask(conditional: torch.Tensor, rows: torch.Tensor, chosen: list[torch.Tensor]) -> torch.Tensor:
    """A later head's (N, nk) mask, from its mask per first-head choice (N, n0, nk) or per choice
    of the first two heads (N, n0, n1, nk), given the rows' `chosen` choices so far."""
    mask = conditional[rows, chosen[0]]
    return mask[rows, chosen[1]] if mask.dim() == 3 else mask


def first_two_probabilities(
    first: MaskedCategorical, second_logits: torch.Tensor, second_masks: torch.Tensor
) -> torch.Tensor:
    """(N, n0, n1): P(first = i) x P(second = j | first = i), each under its mask. A first choice
    with no valid second choice has probability 0 (the first head's mask excludes it)."""
    allowed = second_masks.bool()
    logits = second_logits.float().unsqueeze(1).expand(allowed.shape)
    given = torch.softmax(logits.masked_fill(~allowed, torch.finfo(torch.float32).min), dim=-1) * allowed
    return first.log_probs_all.exp().unsqueeze(-1) * given


def evaluate_factored(
    logits: list[torch.Tensor], resolved_masks: torch.Tensor, actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities and entropies (each (N, H)) of stored `actions` under stored masks."""
    sizes = [lg.shape[-1] for lg in logits]
    masks = resolved_masks.split(sizes, dim=-1)
    dists = [MaskedCategorical(lg, m) for lg, m in zip(logits, masks, strict=True)]
    log_probs = torch.stack([d.log_prob(actions[:, k]) for k, d in enumerate(dists)], dim=-1)
    entropies = torch.stack([d.entropy() for d in dists], dim=-1)
    return log_probs, entropies
