"""A learned controller's diagnostics: the (op, slot) probabilities, the keep/cull AUC, the op
mix and head entropies, in `ppo` metrics and in `eval.json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import tiny_shapes_task, training_signals
from esper.kasmina import Topology
from esper.leyline import GateThresholds, LifecycleOp, SeedStage
from esper.runs.eval_run import policy_diagnostics
from esper.scripts.cli import main
from esper.simic.checkpoint import policy_sha256
from esper.tamiyo import HEADS, PolicySpaces, sample_factored
from esper.tamiyo.diagnostics import BINS, DecisionDiagnostics, KeepCullCounts
from esper.tolaria import TASKS
from test_heuristic import signals, slot

GRID = st.integers(min_value=0, max_value=BINS - 1).map(lambda i: -1.0 + 2.0 * i / (BINS - 1))
"""Scores on the bin centres, where the binned AUC is exact."""


def pairwise_auc(scores: list[float], labels: list[bool]) -> float:
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(GRID, st.booleans()), min_size=1, max_size=40))
def test_the_binned_auc_is_the_pairwise_auc_and_flips_with_the_labels(points) -> None:
    counts, flipped = KeepCullCounts(), KeepCullCounts()
    for score, helpful in points:
        counts.add(score, helpful)
        flipped.add(score, not helpful)
    scores, labels = [p[0] for p in points], [p[1] for p in points]
    if all(labels) or not any(labels):
        assert counts.auc() is None and flipped.auc() is None
        return
    assert counts.auc() == pytest.approx(pairwise_auc(scores, labels), abs=1e-12)
    assert counts.auc() + flipped.auc() == pytest.approx(1.0, abs=1e-12)
    assert (counts.helpful, counts.harmful) == (sum(labels), len(labels) - sum(labels))


def test_counts_from_several_sources_add_up() -> None:
    a, b, both = KeepCullCounts(), KeepCullCounts(), KeepCullCounts()
    for counts, score, helpful in ((a, 0.5, True), (b, -0.2, False), (b, 0.9, True), (a, 0.7, False)):
        counts.add(score, helpful)
        both.add(score, helpful)
    assert KeepCullCounts(a.counts + b.counts).auc() == both.auc() == pytest.approx(0.75)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_op_slot_probabilities_are_a_distribution_under_the_masks(seed: int) -> None:
    """Summed over (op, slot) they are 1; masked pairs have 0; the chosen pair's probability is the
    product of the op's and the slot's (whenever the slot head is active)."""
    spaces = PolicySpaces.derive(Topology.CNN, ("early", "mid", "late"))
    g = torch.Generator().manual_seed(seed)
    stages = list(SeedStage)
    chosen = [stages[int(torch.randint(len(stages), (1,), generator=g))] for _ in range(3)]
    names = ("early", "mid", "late")
    s = signals([slot(n, stage, contribution=1.0) for n, stage in zip(names, chosen, strict=True)])
    masks = spaces.actions.masks(s, GateThresholds())
    logits = [torch.randn(1, n, generator=g) for n in spaces.actions.head_sizes]
    sample = sample_factored(logits, masks, g)
    pairs = sample.pair_probs[0]
    assert float(pairs.sum()) == pytest.approx(1.0, abs=1e-5)
    allowed = masks.conditional[0][0] & masks.first[0].unsqueeze(-1)
    assert bool((pairs[~allowed] == 0).all())
    op, where = int(sample.actions[0, 0]), int(sample.actions[0, 1])
    if bool(sample.head_active[0, 1]):
        joint = float(sample.log_probs[0, :2].sum().exp())
        assert float(pairs[op, where]) == pytest.approx(joint, rel=1e-5)


def test_the_keep_score_is_p_fossilize_minus_p_cull_of_each_probationary_seed() -> None:
    s = training_signals(
        [
            slot("early", SeedStage.PROBATIONARY, contribution=2.0),
            slot("mid", SeedStage.PROBATIONARY, contribution=-1.0, epochs_in_stage=0),
            slot("late", SeedStage.BLENDING, contribution=-5.0),
        ]
    )
    pairs = torch.zeros(len(LifecycleOp), 3)
    pairs[LifecycleOp.FOSSILIZE, 0], pairs[LifecycleOp.CULL, 0] = 0.6, 0.1  # keep score +0.5
    pairs[LifecycleOp.CULL, 1] = 0.3  # keep score -0.3
    pairs[LifecycleOp.CULL, 2] = 0.9  # blending: not a probationary decision
    counts = KeepCullCounts()
    counts.record(s, pairs)
    assert (counts.helpful, counts.harmful) == (1, 1)
    assert counts.auc() == 1.0
    diagnostics = DecisionDiagnostics(HEADS)
    diagnostics.record(s, int(LifecycleOp.WAIT), torch.tensor([1.0, 0.5, 0.0, 0.0]), pairs)
    report = diagnostics.to_json()
    assert report["op_mix"]["wait"] == 1.0 and report["entropy"]["op"] == 1.0
    assert report["keep_cull"] == {"auc": 1.0, "helpful": 1, "harmful": 1}
    assert diagnostics.state()["keep_cull_decisions"] == [
        {"epoch": s.epoch, "slot": "early", "keep_score": pytest.approx(0.5), "contribution": 2.0},
        {"epoch": s.epoch, "slot": "mid", "keep_score": pytest.approx(-0.3), "contribution": -1.0},
    ]


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


@pytest.mark.slow
def test_ppo_metrics_and_eval_json_carry_the_diagnostics(tiny_shapes, workdir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "ppo"
    argv = ["ppo", "--episodes", "2", "--n-envs", "2", "--max-epochs", "8", "--seed", "5", "--quiet"]
    assert main([*argv, "--run-dir", str(run_dir)]) == 0
    row = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"diagnostics/keep_cull_helpful", "diagnostics/keep_cull_harmful", "losses/explained_variance"} <= set(row)
    assert {f"charts/op_{op.name.lower()}" for op in LifecycleOp} <= set(row)
    checkpoint = sorted((run_dir / "checkpoints").glob("round-*.pt"))[-1]
    eval_dir = tmp_path / "eval"
    argv = ["eval", "--controllers", "static", f"policy:{checkpoint}", "--seeds", "7:9", "--max-epochs", "8"]
    assert main([*argv, "--workers", "0", "--run-dir", str(eval_dir)]) == 0
    report = json.loads((eval_dir / "eval.json").read_text())
    diagnostics = report["diagnostics"][f"policy:{checkpoint}"]
    assert diagnostics["decisions"] == 2 * 8
    assert sum(diagnostics["op_mix"].values()) == pytest.approx(1.0, abs=1e-3)
    assert set(diagnostics["entropy"]) == set(HEADS)
    assert set(diagnostics["keep_cull"]) == {"auc", "helpful", "harmful"}
    assert len(diagnostics["keep_cull_decisions"]) == 2, "one list per seed"
    assert report["policy_sha256"] == {f"policy:{checkpoint}": policy_sha256(checkpoint)}


def test_eval_lists_each_seed_s_keep_cull_decisions_in_seed_order() -> None:
    """The per-seed lists follow the seeds' order, not the order the episodes finished in, add up
    to the AUC's counts, and an episode saved before Esper recorded them gives None."""
    rows = []
    for seed, contribution in ((9, -1.0), (7, 2.0)):
        s = training_signals([slot("early", SeedStage.PROBATIONARY, contribution=contribution)])
        diagnostics = DecisionDiagnostics(HEADS)
        diagnostics.record(s, int(LifecycleOp.WAIT), torch.zeros(len(HEADS)), torch.zeros(len(LifecycleOp), 1))
        rows.append({"seed": seed, "diagnostics": diagnostics.state()})
    report = policy_diagnostics(rows)
    assert [[d["contribution"] for d in seed] for seed in report["keep_cull_decisions"]] == [[2.0], [-1.0]]
    assert (report["keep_cull"]["helpful"], report["keep_cull"]["harmful"]) == (1, 1)
    del rows[0]["diagnostics"]["keep_cull_decisions"]  # seed 9's, saved by an older Esper
    assert [None if d is None else len(d) for d in policy_diagnostics(rows)["keep_cull_decisions"]] == [1, None]
