"""`--deterministic` on one GPU: the same seed's run twice gives the same weights, bit for bit
(without it cuDNN's backward convolutions make two runs differ). Skipped without CUDA."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))
import esper.runs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(autouse=True)
def restore_torch_flags() -> Iterator[None]:
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic)
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic = before[1]


def tensors(state: dict) -> dict[str, torch.Tensor]:
    return {k: v.cpu() for k, v in state.items() if isinstance(v, torch.Tensor)}


def test_a_heuristic_run_repeats_bit_for_bit(tmp_path: Path) -> None:
    grown = []
    for rep in range(2):
        run_dir = tmp_path / f"run{rep}"
        esper.runs.heuristic(device="cuda", deterministic=True, max_epochs=4, seed=3, run_dir=run_dir, quiet=True)
        grown.append(tensors(torch.load(run_dir / "grown" / "episode-0000.pt", weights_only=False)["state_dict"]))
    assert grown[0].keys() == grown[1].keys()
    assert all(torch.equal(grown[0][k], grown[1][k]) for k in grown[0])


def test_a_ppo_round_repeats_bit_for_bit(tmp_path: Path) -> None:
    policies = []
    for rep in range(2):
        run_dir = tmp_path / f"run{rep}"
        settings = {"episodes": 2, "n_envs": 2, "max_epochs": 3, "device": "cuda", "deterministic": True}
        summary = esper.runs.ppo(run_dir=run_dir, quiet=True, **settings)
        checkpoint = torch.load(summary["checkpoint"], weights_only=False)
        policies.append(tensors(checkpoint["learner"]["policy"]))
    assert all(torch.equal(policies[0][k], policies[1][k]) for k in policies[0])
