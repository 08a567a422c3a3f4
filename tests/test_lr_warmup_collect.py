"""`experiments/lr-warmup/collect.py`: eval runs of different host knobs gathered into one record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import EXPERIMENTS, load_benchmark

collect = load_benchmark("collect", EXPERIMENTS / "lr-warmup")


def run_dir(path: Path, controller: str, accuracy: list[float], warmup: int | None, **fields: object) -> str:
    """An `esper eval` run directory of one controller on seeds 0..2, as the command writes it."""
    path.mkdir()
    record = {"seeds": [0, 1, 2], "task": "shapes", "max_epochs": 40, "torch": "2.13.0+cpu", "cpu_capability": "AVX512"}
    (path / "eval.json").write_text(json.dumps({**record, **fields}))
    config = {
        "command_line": ["esper", "eval", "--controllers", controller],
        "knobs": {"host": {"lr_warmup_epochs": warmup}},
    }
    (path / "config.json").write_text(json.dumps(config))
    rows = [
        {
            "controller": controller,
            "seed": seed,
            "test_accuracy": a,
            "val_accuracy": a + 1,
            "host_params": 100,
            "seed_params": 10 * seed,
            "train_gflops": 2.0,
            "fossilized": 1,
            "culled": 0,
        }
        for seed, a in zip([2, 0, 1], accuracy, strict=True)  # written out of seed order, as workers finish
    ]
    (path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_arms_pair_seed_by_seed_and_keep_their_knobs(tmp_path: Path) -> None:
    warm = run_dir(tmp_path / "warm", "static", [72.0, 70.0, 71.0], warmup=3)
    plain = run_dir(tmp_path / "plain", "static", [71.0, 71.0, 69.0], warmup=None)
    record, episodes = collect.collect(
        [["warm", warm, "static"], ["plain", plain, "static"]], [["warm", "plain"]], {"warm": "abc"}
    )
    (pair,) = record["paired"]
    # by seed: 0: 70 - 71, 1: 71 - 69, 2: 72 - 71
    assert pair["a_minus_b_test_accuracy"]["mean"] == pytest.approx((-1.0 + 2.0 + 1.0) / 3)
    assert pair["a_ahead_on_test"] == 2
    assert record["arms"]["warm"]["host_knobs"] == {"lr_warmup_epochs": 3}
    assert record["arms"]["plain"]["host_knobs"] == {}
    assert (record["arms"]["warm"]["commit"], record["arms"]["warm"]["mean_final_params"]) == ("abc", 110.0)
    assert [e["arm"] for e in episodes] == ["warm"] * 3 + ["plain"] * 3


@pytest.mark.parametrize(
    "field, value", [("seeds", [0, 1, 3]), ("cpu_capability", "AVX2"), ("max_epochs", 20), ("cpu", "Xeon [avx2]")]
)
def test_arms_that_disagree_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: object
) -> None:
    a = run_dir(tmp_path / "a", "static", [70.0, 70.0, 70.0], warmup=3, cpu="Xeon [amx_tile]")
    b = run_dir(tmp_path / "b", "static", [70.0, 70.0, 70.0], warmup=None, **{field: value})
    out, episodes = tmp_path / "record.json", tmp_path / "episodes.jsonl"
    argv = ["--arm", "a", a, "static", "--arm", "b", b, "static", "--out", str(out), "--episodes", str(episodes)]
    assert collect.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err
    assert not out.exists() and not episodes.exists()


def test_an_arm_recorded_before_the_cpu_field_pairs_and_each_arm_names_its_cpu(tmp_path: Path) -> None:
    new = run_dir(tmp_path / "new", "static", [70.0, 70.0, 70.0], warmup=3, cpu="Xeon [amx_tile]")
    old = run_dir(tmp_path / "old", "static", [70.0, 70.0, 70.0], warmup=3)
    record, _ = collect.collect([["new", new, "static"], ["old", old, "static"]], [], {})
    assert (record["arms"]["new"]["cpu"], record["arms"]["old"]["cpu"], record["cpu"]) == (
        "Xeon [amx_tile]",
        None,
        "Xeon [amx_tile]",
    )


def test_arms_of_two_cpus_are_refused_behind_an_arm_recorded_before_the_field(tmp_path: Path) -> None:
    old = run_dir(tmp_path / "old", "static", [70.0, 70.0, 70.0], warmup=3)
    amx = run_dir(tmp_path / "amx", "static", [70.0, 70.0, 70.0], warmup=3, cpu="Xeon [amx_tile]")
    epyc = run_dir(tmp_path / "epyc", "static", [70.0, 70.0, 70.0], warmup=3, cpu="EPYC [avx512f]")
    with pytest.raises(collect.CollectError, match=r"cpu of arm 'epyc' is 'EPYC \[avx512f\]', not 'Xeon"):
        collect.collect([["old", old, "static"], ["amx", amx, "static"], ["epyc", epyc, "static"]], [], {})


def test_an_unknown_pair_or_a_missing_controller_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = run_dir(tmp_path / "a", "static", [70.0, 70.0, 70.0], warmup=3)
    out, episodes = str(tmp_path / "r.json"), str(tmp_path / "e.jsonl")
    assert collect.main(["--arm", "a", a, "static", "--pair", "a", "b", "--out", out, "--episodes", episodes]) == 2
    assert collect.main(["--arm", "a", a, "heuristic", "--out", out, "--episodes", episodes]) == 2
    assert capsys.readouterr().err.count("\n") == 2


def test_a_host_variant_may_run_its_own_task_and_no_other_arm_may(tmp_path: Path) -> None:
    shaped = run_dir(tmp_path / "shaped", "static", [70.0, 70.0, 70.0], warmup=3, task="shaped:shapes_12_16_40")
    plain = run_dir(tmp_path / "plain", "static", [71.0, 71.0, 69.0], warmup=3)
    arms = [["shaped", shaped, "static"], ["plain", plain, "static"]]
    with pytest.raises(collect.CollectError, match="task of arm 'plain' is 'shapes', not 'shaped:shapes_12_16_40'"):
        collect.collect(arms, [], {})
    record, _ = collect.collect(arms, [["shaped", "plain"]], {}, frozenset({"shaped"}))
    assert record["task"] == "shapes"  # the task itself, from the first arm that ran it
    assert record["arms"]["shaped"]["task"] == "shaped:shapes_12_16_40"
    assert "task" not in record["arms"]["plain"]
    with pytest.raises(collect.CollectError, match="one arm must run the task itself"):
        collect.collect(arms, [], {}, frozenset({"shaped", "plain"}))
    with pytest.raises(collect.CollectError, match="names an arm not given"):
        collect.collect(arms, [], {}, frozenset({"wide"}))


def committed_eval_record(folder: Path, name: str, run: str) -> Path:
    """An eval run directory committed as a record: `name.json`, `_config.json`, `_episodes.jsonl`."""
    for source, suffix in (
        ("eval.json", ".json"),
        ("config.json", "_config.json"),
        ("episodes.jsonl", "_episodes.jsonl"),
    ):
        (folder / f"{name}{suffix}").write_text((Path(run) / source).read_text())
    return folder / f"{name}.json"


def test_committed_records_pair_with_a_run_directory_on_a_subset_of_seeds(tmp_path: Path) -> None:
    """Held episodes whose run directory is gone: an eval's committed record and a record of this
    script, taken on the seeds they share with a new run."""
    records = tmp_path / "records"
    records.mkdir()
    held_run = run_dir(tmp_path / "h", "matched", [70.0, 72.0, 74.0], 3)  # seeds 2, 0, 1
    held = committed_eval_record(records, "held", held_run)
    record, episodes = collect.collect([["held", str(held), "matched"]], [], {"held": "abc"})
    mine = records / "mine.json"
    mine.write_text(json.dumps(record))
    (records / "mine_episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    new = run_dir(tmp_path / "new", "policy:x", [71.0, 71.0, 71.0], 3, seeds=[1, 2, 3])
    rows = (tmp_path / "new" / "episodes.jsonl").read_text().replace('"seed": 0', '"seed": 3')
    (tmp_path / "new" / "episodes.jsonl").write_text(rows)  # seeds 1, 2, 3
    arms = [["new", new, "policy:x"], ["eval_held", str(held), "matched"], ["script_held", str(mine), "held"]]
    record, episodes = collect.collect(arms, [["new", "eval_held"]], {"new": "def"}, seeds=(1, 2))
    assert record["seeds"] == [1, 2]
    assert record["arms"]["eval_held"]["command_line"] == ["eval", "--controllers", "matched"]
    assert record["arms"]["script_held"]["commit"] == "abc"  # carried from the record it was held in
    assert record["arms"]["script_held"]["source"] == str(mine)
    # seed 1: 71 - 74, seed 2: 71 - 70
    assert record["paired"][0]["a_minus_b_test_accuracy"]["mean"] == pytest.approx(-1.0)
    assert [(e["arm"], e["seed"]) for e in episodes][:2] == [("new", 1), ("new", 2)]
    assert {e["arm"] for e in episodes} == {"new", "eval_held", "script_held"}  # renamed, as the record
    with pytest.raises(collect.CollectError, match="for 3 seeds"):
        collect.collect(arms, [], {}, seeds=(1, 2, 3))  # the held runs lack seed 3
    with pytest.raises(collect.CollectError, match="no arm 'other'"):
        collect.collect([["x", str(mine), "other"]], [], {})


@pytest.mark.parametrize("text", ["5", "5:x", "7:5"])
def test_a_bad_seed_range_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    a = run_dir(tmp_path / "a", "static", [70.0, 70.0, 70.0], warmup=3)
    out, episodes = tmp_path / "r.json", tmp_path / "e.jsonl"
    argv = ["--arm", "a", a, "static", "--seeds", text, "--out", str(out), "--episodes", str(episodes)]
    assert collect.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--seeds {text!r}" in err
    assert not out.exists()
