"""`experiments/learned-controller/pair_evals.py`: two controllers of separate eval runs, paired by seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import EXPERIMENTS, load_benchmark

pair_evals = load_benchmark("pair_evals", EXPERIMENTS / "learned-controller")


def eval_file(path: Path, name: str, accuracy: list[float], **fields: object) -> str:
    run = {"seeds": [0, 1, 2], "task": "shapes", "max_epochs": 40, "torch": "2.13.0+cpu", "cpu_capability": "AVX512"}
    row = {
        "test_accuracy": accuracy,
        "val_accuracy": [a + 1 for a in accuracy],
        "seed_params": [10, 20, 30],
        "train_gflops": [1.0, 2.0, 3.0],
    }
    path.write_text(json.dumps({**run, **fields, "controllers": {name: row}}))
    return str(path)


def test_two_runs_pair_seed_by_seed(tmp_path: Path) -> None:
    a = eval_file(tmp_path / "a.json", "policy:/p.pt", [70.0, 60.0, 65.0])
    b = eval_file(tmp_path / "b.json", "heuristic", [69.0, 62.0, 62.0])
    paired = pair_evals.pair(a, "policy:/p.pt", b, "heuristic")
    assert paired["a_minus_b_test_accuracy"]["mean"] == pytest.approx((1.0 - 2.0 + 3.0) / 3)
    assert paired["a_minus_b_selection_accuracy"]["mean"] == pytest.approx(2.0 / 3)
    assert (paired["a_ahead_on"], paired["n_seeds"], paired["a_mean_added_params"]) == (2, 3, 20.0)


@pytest.mark.parametrize(
    "field, value", [("seeds", [0, 1, 3]), ("cpu_capability", "AVX2"), ("max_epochs", 20), ("task", "pydoc")]
)
def test_runs_that_disagree_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: object
) -> None:
    a = eval_file(tmp_path / "a.json", "policy:/p.pt", [70.0, 60.0, 65.0])
    b = eval_file(tmp_path / "b.json", "heuristic", [69.0, 62.0, 62.0], **{field: value})
    assert pair_evals.main(["--a", a, "policy:/p.pt", "--b", b, "heuristic"]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and field in out


def test_a_controller_the_run_lacks_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = eval_file(tmp_path / "a.json", "policy:/p.pt", [70.0, 60.0, 65.0])
    assert pair_evals.main(["--a", a, "policy:shapes", "--b", a, "policy:/p.pt"]) == 2
    assert "holds no 'policy:shapes'; it holds: policy:/p.pt" in capsys.readouterr().out
