"""`experiments/keep-cull-reading/first_readings.py`: what a seed's first probationary reading says about its next."""

from __future__ import annotations

import json

from conftest import EXPERIMENTS, load_benchmark


def load_script():
    return load_benchmark("first_readings", EXPERIMENTS / "keep-cull-reading")


def decision(epoch: int, slot: str, keep: float, contribution: float) -> dict:
    return {"epoch": epoch, "slot": slot, "keep_score": keep, "contribution": contribution}


EPISODE = [
    decision(10, "early", -0.01, -0.3),  # waited, read +0.4 next: recovered
    decision(11, "early", 0.9, 0.4),
    decision(12, "mid", -0.02, 0.2),  # waited, no reading at 13: the lifecycle culled it
    decision(20, "mid", -0.9, -0.5),  # culled by the controller
    decision(25, "early", -0.01, 0.6),  # waited, read +0.8 next
    decision(26, "early", 0.9, 0.8),
    decision(39, "mid", -0.01, -0.1),  # the last epoch: no next decision could come
]


def test_first_readings_are_paired_with_the_next_reading_on_the_same_slot() -> None:
    firsts = load_script().first_readings(EPISODE, max_epochs=40)
    assert [(f["epoch"], f["slot"], f["next"], f["policy_culled"], f["last_epoch"]) for f in firsts] == [
        (10, "early", 0.4, False, False),
        (12, "mid", None, False, False),
        (20, "mid", None, True, False),
        (25, "early", 0.8, False, False),
        (39, "mid", None, False, True),
    ]


def test_the_summary_counts_by_the_first_reading_s_sign(tmp_path, capsys, monkeypatch) -> None:
    module = load_script()
    path = tmp_path / "eval.json"
    run = {"seeds": [7], "max_epochs": 40, "diagnostics": {"policy:x": {"keep_cull_decisions": [EPISODE]}}}
    path.write_text(json.dumps(run))
    monkeypatch.setattr("sys.argv", ["first_readings.py", str(path)])
    assert module.main() == 0
    out = json.loads(capsys.readouterr().out)["policy:x"]
    assert out["first_at_or_below_0"] == {
        "readings": 2,
        "culled_by_the_controller": 1,
        "waited": 1,
        "next_above_0": 1,
        "culled_by_the_lifecycle_next": 0,
    }
    assert out["first_above_0"] == {
        "readings": 2,
        "culled_by_the_controller": 0,
        "waited": 2,
        "next_above_0": 1,
        "culled_by_the_lifecycle_next": 1,
    }
    assert out["at_the_last_epoch"] == 1 and out["pairs"] == 2
    assert abs(out["mean_next_minus_first"] - 0.45) < 1e-9


def test_a_file_without_decisions_is_a_one_line_error(tmp_path, capsys, monkeypatch) -> None:
    path = tmp_path / "eval.json"
    run = {"seeds": [1], "max_epochs": 40, "diagnostics": {"policy:x": {"keep_cull_decisions": [None]}}}
    path.write_text(json.dumps(run))
    monkeypatch.setattr("sys.argv", ["first_readings.py", str(path)])
    assert load_script().main() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "keep_cull_decisions" in err
