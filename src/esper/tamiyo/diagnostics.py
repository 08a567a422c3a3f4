"""What a learned controller's decisions show at a glance: its op mix, each head's entropy, and
whether its keep/cull choices track the seeds' measured contribution.

The keep/cull diagnostic. At every decision where a slot holds a PROBATIONARY seed with a
measured contribution, the policy's *keep score* for that seed is P(FOSSILIZE it) - P(CULL it)
under the masks, and its label is the sign of the contribution (> 0: the seed helps). The AUC of
the scores against the labels is the probability that a helpful seed scores above a harmful
one: 0.5 is a policy whose keep/cull choices ignore the contribution, 1 one that keeps exactly
the helpful seeds. The gates shape it: FOSSILIZE is masked until a seed has spent a probation
epoch with a positive contribution (and a seed at or below zero after that is culled by the
lifecycle), so a harmful seed is scored at its first probationary decision, where only CULL
(or waiting) is open to the policy. The counts of each label are reported with the AUC so a
degenerate one (a class with few decisions) is visible.

Scores are counted in `BINS` bins over [-1, 1], so the counts of several envs, episodes or
`torchrun` ranks add up, and the AUC is computed from the counts (ties within a bin count 1/2).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from esper.leyline import LifecycleOp, SeedStage, SlotSignals, TrainingSignals

BINS = 2001
"""Bins of the keep score over [-1, 1]: 0.001 wide."""


def scored_slots(signals: TrainingSignals) -> list[tuple[int, SlotSignals]]:
    """The slots (index in the slot head's order, signals) whose seed a keep/cull decision is
    scored on: probationary, with a measured contribution. A decision with any is a keep/cull
    decision (what `--clone-decisions keep-cull` clones)."""
    return [
        (k, s) for k, s in enumerate(signals.slots) if s.stage is SeedStage.PROBATIONARY and s.contribution is not None
    ]


def keep_scores(signals: TrainingSignals, pair_probs: torch.Tensor) -> list[tuple[SlotSignals, float]]:
    """Each scored slot of one decision with its keep score, P(FOSSILIZE it) - P(CULL it);
    `pair_probs` (ops, slots) is the policy's probability of each op on each slot."""
    return [
        (s, float(pair_probs[LifecycleOp.FOSSILIZE, k] - pair_probs[LifecycleOp.CULL, k]))
        for k, s in scored_slots(signals)
    ]


class KeepCullCounts:
    """Counts of keep scores by label (helpful / harmful seed), addable across envs and ranks."""

    def __init__(self, counts: torch.Tensor | None = None) -> None:
        self.counts = torch.zeros(2, BINS, dtype=torch.float64) if counts is None else counts
        """(2, BINS): row 1 counts helpful seeds' scores, row 0 harmful seeds'."""

    def add(self, score: float, helpful: bool) -> None:
        index = round((min(max(score, -1.0), 1.0) + 1.0) / 2.0 * (BINS - 1))
        self.counts[int(helpful), index] += 1

    def record(self, signals: TrainingSignals, pair_probs: torch.Tensor) -> list[tuple[SlotSignals, float]]:
        """One decision: `pair_probs` (ops, slots) the policy's probability of each op on each slot.
        Returns the scored slots with their keep scores, as counted."""
        scored = keep_scores(signals, pair_probs)
        for s, keep in scored:
            self.add(keep, s.contribution > 0)  # type: ignore[operator]
        return scored

    @property
    def helpful(self) -> int:
        return int(self.counts[1].sum())

    @property
    def harmful(self) -> int:
        return int(self.counts[0].sum())

    def auc(self) -> float | None:
        """P(a helpful seed's score > a harmful one's) + P(tie) / 2; None without both labels."""
        pos, neg = self.counts[1], self.counts[0]
        pairs = pos.sum() * neg.sum()
        if pairs == 0:
            return None
        neg_below = torch.cumsum(neg, 0) - neg  # harmful scores in lower bins
        return float(((pos * neg_below).sum() + 0.5 * (pos * neg).sum()) / pairs)

    def to_json(self) -> dict[str, float | int | None]:
        auc = self.auc()
        return {"auc": None if auc is None else round(auc, 4), "helpful": self.helpful, "harmful": self.harmful}


class DecisionDiagnostics:
    """A learned controller's decisions over episodes: op mix, mean entropy per head, keep/cull."""

    def __init__(self, heads: Sequence[str]) -> None:
        self.heads = tuple(heads)
        self.ops = [0] * len(LifecycleOp)
        self.entropy_sums = [0.0] * len(self.heads)
        self.decisions = 0
        self.keep_cull = KeepCullCounts()
        self.keep_cull_decisions: list[dict[str, object]] = []
        """Each keep/cull decision recorded here (not those `absorb`ed): its epoch, the slot, the
        keep score and the contribution, unrounded (a rounded contribution could flip its label).
        The counts give the AUC; these say which decisions carry it. Pool several through
        `KeepCullCounts.add`, so ties are binned as the reported AUC bins them."""

    def record(self, signals: TrainingSignals, op: int, entropies: torch.Tensor, pair_probs: torch.Tensor) -> None:
        """One decision: the op taken, each head's entropy (H,), the (op, slot) probabilities."""
        self.ops[op] += 1
        for k, value in enumerate(entropies.tolist()):
            self.entropy_sums[k] += value
        self.decisions += 1
        for slot, keep in self.keep_cull.record(signals, pair_probs):
            decision = {"epoch": signals.epoch, "slot": slot.name, "keep_score": keep}
            self.keep_cull_decisions.append({**decision, "contribution": slot.contribution})

    def state(self) -> dict[str, object]:
        """The raw sums, as plain lists: what a worker process sends back to be `absorb`ed."""
        return {
            "ops": list(self.ops),
            "entropy_sums": list(self.entropy_sums),
            "keep_cull": self.keep_cull.counts.tolist(),
            "keep_cull_decisions": list(self.keep_cull_decisions),
        }

    def absorb(self, state: dict) -> None:
        """Add another controller's `state()` (other seeds' episodes) to these sums."""
        self.ops = [a + b for a, b in zip(self.ops, state["ops"], strict=True)]
        self.entropy_sums = [a + b for a, b in zip(self.entropy_sums, state["entropy_sums"], strict=True)]
        self.decisions += sum(state["ops"])
        self.keep_cull.counts += torch.tensor(state["keep_cull"], dtype=torch.float64)

    def to_json(self) -> dict[str, object]:
        n = max(self.decisions, 1)
        return {
            "decisions": self.decisions,
            "op_mix": {op.name.lower(): round(self.ops[op] / n, 4) for op in LifecycleOp},
            "entropy": {head: round(total / n, 4) for head, total in zip(self.heads, self.entropy_sums, strict=True)},
            "keep_cull": self.keep_cull.to_json(),
        }
