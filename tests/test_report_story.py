"""The report tells a run's story: unit tests on small run directories written by hand (fast tier).

Each test checks one thing a reader relies on: stage bars centred on the epochs the log numbers,
changes marked on the accuracy curve, a colour per slot, a grown run against its static twin,
an eval run's table, and a PPO panel that says why it is empty.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.colors
import pytest

from esper.karn import figures
from esper.karn.html import run_table, write_eval_report
from esper.karn.rundir import RunView, read_run
from esper.scripts.cli import main
from test_cli import check_usage_error

SLOTS = ("early", "mid")
STAGES = {  # slot -> {epoch: stage}, as `epoch` events record the stage after that epoch's step
    "early": {3: "TRAINING", 4: "BLENDING", 5: "PROBATIONARY", 6: "FOSSILIZED"},
    "mid": {2: "TRAINING", 3: "BLENDING", 4: "PROBATIONARY", 5: "CULLED"},
}
CHANGES = [(3, "early", "GERMINATED"), (6, "early", "FOSSILIZED"), (2, "mid", "GERMINATED"), (5, "mid", "CULLED")]


def write_run(folder: Path, controller: str, accuracies: list[float], seed: int = 0, grow: bool = True) -> Path:
    """A one-episode `grow` run of six epochs: its config, events and the episode's end."""
    folder.mkdir(parents=True)
    settings = {"task": "shapes", "controller": controller, "seed": seed, "max_germinations": 6}
    (folder / "config.json").write_text(json.dumps({"command": "grow", "settings": settings, "knobs": {}}))
    lines = []
    for epoch, accuracy in enumerate(accuracies, start=1):
        for when, slot, target in CHANGES if grow else []:
            if when == epoch:
                change = {"slot": slot, "seed_id": f"s-{slot}", "blueprint": "conv_light", "source": "X"}
                lines.append({"kind": "stage_change", "episode": 0, "epoch": epoch, **change, "target": target})
        slots = [
            {"slot": s, "stage": STAGES[s].get(epoch, "DORMANT") if grow else "DORMANT", "alpha": 0.0}
            | {"blueprint": None, "seed_id": None, "contribution": 0.5 if epoch >= 4 and grow else None}
            for s in SLOTS
        ]
        lines.append(
            {"kind": "epoch", "episode": 0, "epoch": epoch, "decision": {"op": "WAIT"}, "train_accuracy": accuracy}
            | {"val_accuracy": accuracy, "host_params": 1000, "seed_params": 200 if grow else 0, "slots": slots}
        )
    end = {"final_val_accuracy": accuracies[-1], "final_test_accuracy": accuracies[-1], "host_params": 1000}
    lines.append({"kind": "episode_end", "episode": 0, "epoch": 6, **end, "seed_params": 0, "train_gflops": 5.0})
    (folder / "events.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


@pytest.fixture
def grown(tmp_path: Path) -> RunView:
    return read_run(write_run(tmp_path / "grown", "heuristic", [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]))


@pytest.fixture
def twin(tmp_path: Path) -> RunView:
    return read_run(write_run(tmp_path / "twin", "static", [10.0, 20.0, 28.0, 37.0, 46.0, 55.0], grow=False))


def test_stage_bars_are_centred_on_the_epochs_the_log_reports(grown: RunView) -> None:
    """A seed germinated at epoch 3 (the log's and events.jsonl's number) used to start its lane at 2."""
    ax = figures.swimlanes([grown]).axes[0]
    bars = [p for p in ax.patches if p.get_width() == 1]
    early = sorted(
        p.get_x() for p in bars if round(p.get_y() + p.get_height() / 2) == 0 and p.get_facecolor()[:3] != (1, 1, 1)
    )
    assert early == [2.5, 3.5, 4.5, 5.5]  # epochs 3..6, each bar [epoch - 0.5, epoch + 0.5]


def test_changes_are_marked_on_the_selection_curve(grown: RunView) -> None:
    ax = figures.host_accuracy([grown]).axes[0]
    points = {tuple(map(float, xy)) for c in ax.collections for xy in c.get_offsets()}
    for epoch, _, _ in CHANGES:
        assert (float(epoch), grown.last_episode.val_accuracy[epoch - 1]) in points
    labels = ax.get_legend_handles_labels()[1]
    assert {"seed germinated", "seed fossilized", "seed culled"} <= set(labels)


def test_each_slot_has_its_own_colour(grown: RunView, twin: RunView) -> None:
    ax = figures.contributions([grown, twin]).axes[0]
    colours = {
        line.get_label(): matplotlib.colors.to_hex(line.get_color()) for line in ax.lines if line.get_label()[0] != "_"
    }
    assert len(colours) == 2 and len(set(colours.values())) == 2


def test_parameters_show_host_and_seeds(grown: RunView) -> None:
    ax = figures.parameters([grown]).axes[0]
    host, total = (list(line.get_ydata()) for line in ax.lines)
    assert host == [1000] * 6 and total == [1200] * 6


def test_the_table_pairs_a_grown_run_with_its_static_twin(grown: RunView, twin: RunView) -> None:
    table = run_table([grown, twin])
    assert "test − static twin" in table and "+5.00 (1 seed)" in table
    assert "host params" in table and "1,000" in table and "train GFLOPs" in table
    assert "static twin" not in run_table([grown])  # one run alone has no twin


def test_a_run_that_cannot_grow_is_a_static_twin(tmp_path: Path, grown: RunView) -> None:
    folder = write_run(tmp_path / "nogrow", "heuristic", [10.0] * 6, grow=False)
    config = json.loads((folder / "config.json").read_text())
    config["settings"]["max_germinations"] = 0
    (folder / "config.json").write_text(json.dumps(config))
    assert not read_run(folder).grows and grown.grows


def test_the_ppo_panel_says_why_the_keep_cull_auc_is_empty(tmp_path: Path) -> None:
    rows = [{"round": r, "charts/episodic_return": float(r)} for r in (1, 2, 3)]
    run = RunView(tmp_path, {}, None, {}, rows)
    fig = figures.ppo_rounds([run])
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("AUC is undefined" in t for t in texts)
    ticks = fig.axes[0].get_xticks()
    assert all(float(t).is_integer() for t in ticks)  # rounds, not 1.5


EVAL = {
    "task": "shapes",
    "max_epochs": 6,
    "seeds": [0, 1, 2],
    "controllers": {
        name: {"test_accuracy": acc, "host_params": [1000] * 3, "seed_params": seeds, "train_gflops": [5.0] * 3}
        | {"seconds": [2.0] * 3}
        for name, acc, seeds in (("static", [50.0, 52.0, 54.0], [0] * 3), ("heuristic", [51.0, 53.5, 55.0], [200] * 3))
    },
    "test_accuracy": {
        "static": {"mean": 52.0, "std": 2.0, "ci95": [47.0, 57.0], "n": 3},
        "heuristic": {"mean": 53.17, "std": 2.0, "ci95": [48.0, 58.0], "n": 3},
    },
    "paired": {"heuristic - static": {"mean": 1.17, "std": 0.29, "ci95": [0.45, 1.88], "n": 3}},
}


def test_report_of_an_eval_run_shows_its_controllers_and_paired_differences(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "eval_run"
    folder.mkdir()
    (folder / "eval.json").write_text(json.dumps(EVAL))
    assert main(["report", str(folder)]) == 0
    page = (folder / "report" / "report.html").read_text()
    assert "Esper eval report: eval_run" in page and "heuristic - static" in page and "[+0.45, +1.88]" in page
    assert "<td class=num>200</td>" in page  # added params
    assert (folder / "report" / "eval_paired.png").stat().st_size > 5_000


def test_report_refuses_an_eval_run_among_training_runs_and_a_damaged_record(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "eval_run"
    folder.mkdir()
    (folder / "eval.json").write_text(json.dumps({**EVAL, "controllers": {}}))
    check_usage_error(capsys, ["report", str(folder)], "eval.json", "damaged")
    grown = write_run(tmp_path / "g", "heuristic", [1.0] * 6)
    check_usage_error(capsys, ["report", str(grown), str(folder)], "is an eval run", "alone")
    assert not (folder / "report").exists() and not (grown / "report").exists()


def test_eval_figure_draws_every_seed_and_pair(tmp_path: Path) -> None:
    page = write_eval_report(EVAL, "e", tmp_path / "out")
    assert page.exists()
    fig = figures.eval_paired(EVAL)
    left, right = fig.axes
    assert sum(len(c.get_offsets()) for c in left.collections if len(c.get_offsets())) >= 6
    assert [t.get_text() for t in right.get_yticklabels()] == ["heuristic - static"]
