"""`experiments/learned-controller/pool_evals.py`: one paired estimate over several eval runs on disjoint seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import EXPERIMENTS, load_benchmark


def load_script():
    return load_benchmark("pool_evals", EXPERIMENTS / "learned-controller")


def eval_file(path: Path, seeds: list[int], controllers: dict[str, tuple[list[float], list[int]]]) -> str:
    path.write_text(
        json.dumps(
            {
                "seeds": seeds,
                "controllers": {
                    name: {"test_accuracy": accuracy, "seed_params": params}
                    for name, (accuracy, params) in controllers.items()
                },
            }
        )
    )
    return str(path)


def test_pooling_pairs_seed_by_seed_across_files_and_names(tmp_path: Path) -> None:
    pool = load_script().pool
    runs = {"policy:/x.pt": ([70.0, 60.0], [10, 10]), "heuristic": ([69.0, 61.0], [0, 20])}
    first = eval_file(tmp_path / "a.json", [0, 1], runs)
    second = eval_file(tmp_path / "b.json", [2], {"policy:shapes": ([65.0], [40]), "heuristic": ([62.0], [60])})
    pooled = pool([first, second], ["policy:shapes", "policy:/x.pt"], ["heuristic"])
    assert pooled["n_seeds"] == 3
    assert pooled["a_minus_b_test_accuracy"]["mean"] == pytest.approx((1.0 - 1.0 + 3.0) / 3)
    assert pooled["a_ahead_on"] == 2
    assert pooled["a_mean_added_params"] == 20.0
    assert pooled["b_mean_added_params"] == pytest.approx(80 / 3, abs=0.05)
    assert [f["seeds"] for f in pooled["per_file"]] == [[0, 1], [2, 2]]


def test_repeated_seeds_or_a_missing_controller_are_refused(tmp_path: Path) -> None:
    pool = load_script().pool
    one = eval_file(tmp_path / "a.json", [0, 1], {"p": ([1.0, 2.0], [0, 0]), "h": ([1.0, 1.0], [0, 0])})
    again = eval_file(tmp_path / "b.json", [1, 2], {"p": ([1.0, 2.0], [0, 0]), "h": ([1.0, 1.0], [0, 0])})
    with pytest.raises(SystemExit, match=r"repeats seeds \[1\]"):
        pool([one, again], ["p"], ["h"])
    with pytest.raises(SystemExit, match="holds 0 of q"):
        pool([one], ["q"], ["h"])


def test_an_alias_given_with_its_file_counts_in_that_file_only(tmp_path: Path) -> None:
    """One checkpoint path named two different policies in two runs: `NAME@FILE` pools the one
    of FILE, and the same name in another file is not taken for it."""
    pool = load_script().pool
    first = eval_file(tmp_path / "a.json", [0], {"policy:shapes": ([70.0], [1]), "h": ([69.0], [0])})
    mixed = {"policy:shapes": ([65.0], [1]), "policy:/tmp/x.pt": ([66.0], [1]), "h": ([64.0], [0])}
    second = eval_file(tmp_path / "b.json", [1], mixed)
    other = eval_file(tmp_path / "c.json", [2], {"policy:/tmp/x.pt": ([50.0], [1]), "h": ([64.0], [0])})
    names = ["policy:shapes", "policy:/tmp/x.pt@a.json"]
    pooled = pool([first, second], names, ["h"])
    assert pooled["a"] == "policy:shapes"
    assert pooled["a_minus_b_test_accuracy"]["mean"] == pytest.approx((1.0 + 1.0) / 2)
    with pytest.raises(SystemExit, match="holds 0 of"):
        pool([other], names, ["h"])


def test_one_name_recorded_with_two_policy_files_is_refused(tmp_path: Path) -> None:
    """`policy:shapes` names whatever ships when the eval runs: files that record different hashes
    for it are not one policy and are not pooled; a file without hashes (older evals) is taken as
    it is."""
    pool = load_script().pool
    runs = {"policy:shapes": ([70.0], [10]), "heuristic": ([69.0], [0])}
    paths = []
    for name, seed, digest in (("a.json", 0, "aa" * 32), ("b.json", 1, "bb" * 32), ("c.json", 2, None)):
        path = Path(eval_file(tmp_path / name, [seed], runs))
        if digest is not None:
            path.write_text(json.dumps({**json.loads(path.read_text()), "policy_sha256": {"policy:shapes": digest}}))
        paths.append(str(path))
    assert pool([paths[0], paths[2]], ["policy:shapes"], ["heuristic"])["n_seeds"] == 2
    with pytest.raises(SystemExit, match="is not one policy across these files"):
        pool(paths, ["policy:shapes"], ["heuristic"])
