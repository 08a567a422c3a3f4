"""`tools/tune_heuristic.py`: the search draws rotations from the blueprints it is given (width
ones among them), and bad input is one line, exit code 2, with nothing written."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_benchmark
from esper.leyline import GateThresholds
from esper.tamiyo import PREFERRED_BLUEPRINTS
from esper.tolaria import get_task

ROOT = Path(__file__).resolve().parents[1]
tune = load_benchmark("tune_heuristic", ROOT / "tools")


def test_the_default_draws_from_the_residual_blueprints() -> None:
    shapes = get_task("shapes")
    assert tune.preferred_blueprints(shapes, None) == PREFERRED_BLUEPRINTS[shapes.topology]


def test_named_width_blueprints_can_lead_a_drawn_rotation() -> None:
    preferred = tune.preferred_blueprints(get_task("shapes"), ["widen_25", "widen_50", "conv_heavy"])
    drawn = tune.candidates(12, preferred, random.Random(0))
    assert drawn[0]["blueprint_order"] == ["widen_25", "widen_50", "conv_heavy"]  # the defaults, in the given order
    firsts = {c["blueprint_order"][0] for c in drawn}
    assert firsts == {"widen_25", "widen_50", "conv_heavy"}
    assert all(sorted(c["blueprint_order"]) == sorted(preferred) for c in drawn)


def test_a_candidate_heuristic_germinates_the_width_blueprints_of_its_rotation() -> None:
    shapes = get_task("shapes")
    knobs = tune.candidates(1, ("widen_25", "widen_50", "conv_heavy"), random.Random(0))[0]
    heuristic = tune.candidate_heuristic(shapes, knobs, GateThresholds())
    assert heuristic.rotation == ("widen_25", "widen_50", "conv_heavy")
    preferred = PREFERRED_BLUEPRINTS[shapes.topology]
    residual = tune.candidates(1, preferred, random.Random(0))[0]
    assert tune.candidate_heuristic(shapes, residual, GateThresholds()).rotation == preferred


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--blueprints", "widen_25", "nope"], "'nope'"),
        (["--blueprints", "mlp"], "'mlp'"),  # a transformer blueprint on the CNN
        (["--blueprints", "widen_25", "widen_25"], "named twice"),
        (["--seeds", "x:y"], "'x:y'"),
        (["--task", "nope"], "'nope'"),
        (["--workers", "0"], "--workers 0"),
        (["--candidates", "0"], "--candidates 0"),
        (["--max-epochs", "0"], "--max-epochs 0"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv: list[str], fragment: str, tmp_path: Path) -> None:
    out = tmp_path / "search.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "tune_heuristic.py"), *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tune_heuristic: ") and fragment in lines[0], done.stderr
    assert not out.exists()


@pytest.mark.slow
def test_a_tiny_search_with_width_blueprints_records_them(tmp_path: Path) -> None:
    out = tmp_path / "search.json"
    argv = ["--seeds", "100:101", "--confirm-seeds", "101:102", "--candidates", "2", "--finalists", "1"]
    argv += ["--max-epochs", "2", "--workers", "1", "--blueprints", "widen_25", "conv_light", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "tune_heuristic.py"), *argv], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["blueprints"] == ["widen_25", "conv_light"]
    assert report["candidates"][0]["blueprint_order"] == ["widen_25", "conv_light"]
    assert len(report["episodes"]) == 2 + 1  # two candidates on one seed, the finalist on one more


def test_an_out_path_that_is_a_folder_is_refused_before_the_search(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "tune_heuristic.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "a folder" in done.stderr and len(done.stderr.strip().splitlines()) == 1
