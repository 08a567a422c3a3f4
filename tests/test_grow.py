"""`esper grow --controller C`: one command grows hosts with any controller (a learned policy
from a checkpoint or shipped by name, the heuristic, random, static); and `policy:NAME` finds a
shipped policy."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import load_benchmark, tiny_shapes_task
from esper.runs.eval_run import parse_controller
from esper.scripts.cli import main
from esper.simic import CheckpointError, PolicyController
from esper.simic.checkpoint import policy_only, read_checkpoint
from esper.tamiyo import trained
from esper.tolaria import TASKS
from test_cli import check_usage_error, plateau_task
from test_controller import decisions_of
from test_eval import policy_checkpoint  # noqa: F401 (a module-scoped fixture: one tiny ppo run)

FAST = ["--max-epochs", "2", "--quiet"]


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


@pytest.fixture
def shipped(policy_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # noqa: F811
    """A folder of shipped policies holding the tiny run's policy as `tiny`."""
    folder = tmp_path / "trained"
    folder.mkdir()
    shutil.copy(policy_checkpoint, folder / "tiny.pt")
    monkeypatch.setattr(trained, "TRAINED_DIR", folder)
    return folder / "tiny.pt"


def test_policy_name_finds_the_shipped_file_and_a_path_is_always_a_file(shipped: Path) -> None:
    assert parse_controller("policy:tiny").path == str(shipped)
    assert parse_controller("policy:runs/tiny.pt").path == "runs/tiny.pt"
    assert parse_controller("policy:./tiny").path == "./tiny"  # a path, even where a shipped name matches
    assert parse_controller("policy:other").path == "other"  # no such name: left as a file name
    assert trained.trained_policy_names() == ("tiny",)


def test_grow_with_a_shipped_policy_by_name(tiny_shapes, shipped: Path, workdir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "grown"
    assert main(["grow", "--controller", "policy:tiny", "--episodes", "2", *FAST, "--run-dir", str(run_dir)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["controller"] == "policy:tiny"
    assert summary["episodes"] == 2 and len(summary["final_test_accuracy_per_episode"]) == 2
    assert sorted(p.name for p in (run_dir / "grown").iterdir()) == ["episode-0000.pt", "episode-0001.pt"]


@pytest.mark.parametrize("controller", ["static", "random", "heuristic"])
def test_grow_with_each_baseline(controller: str, tiny_shapes, workdir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / controller
    assert main(["grow", "--controller", controller, *FAST, "--run-dir", str(run_dir)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["controller"] == controller
    if controller == "static":
        assert summary["seed_params"] == 0


@pytest.mark.slow
def test_grow_with_the_heuristic_equals_the_heuristic_command(
    workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One implementation: `grow --controller heuristic` is `heuristic`, result for result."""
    monkeypatch.setitem(TASKS, "shapes", plateau_task(tiny_shapes_task()))  # it grows at once
    argv = ["--max-epochs", "12", "--quiet", "--seed", "3"]
    assert main(["heuristic", *argv, "--run-dir", str(tmp_path / "a")]) == 0
    assert main(["grow", "--controller", "heuristic", *argv, "--run-dir", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / x / "summary.json").read_text())["episode_results"] for x in "ab")
    for result in (*a, *b):
        result.pop("seconds")
    assert a == b
    assert a[0]["seeds"]  # the heuristic grew something


@pytest.mark.parametrize(
    ("controller", "fragments"),
    [
        ("matched", ["'matched'", "static random heuristic"]),
        ("bogus", ["'bogus'", "policy:PATH|NAME"]),
        ("policy:nothing", ["no shipped policy", "'nothing'", "shipped policies:"]),
        ("policy:/no/such.pt", ["--controller policy:/no/such.pt", "does not exist"]),
        ("schedule:nope", ["'schedule:nope'", "schedule:SCHEDULE"]),
        (
            "schedule:early=widen_25@1 --slots mid",
            ["--controller schedule:early=widen_25@1:", "'early' is not enabled"],
        ),
    ],
)
def test_a_bad_controller_is_one_line_and_writes_nothing(
    controller: str, fragments: list[str], tiny_shapes, workdir: Path, tmp_path: Path, capsys
) -> None:
    run_dir = tmp_path / "run"
    argv = ["grow", "--controller", *controller.split(), *FAST, "--run-dir", str(run_dir)]
    check_usage_error(capsys, argv, *fragments)
    assert not run_dir.exists()


def test_a_policy_file_acts_as_its_checkpoint_does_at_a_third_of_the_size(
    policy_checkpoint: Path,  # noqa: F811
    tiny_shapes,
    workdir: Path,
    tmp_path: Path,
) -> None:
    """`policy_only` (what `tools/ship_policy.py` ships) keeps what acting reads: the same
    greedy decisions as the full checkpoint; without the optimizer a resume refuses it."""
    cut = tmp_path / "policy.pt"
    torch.save(policy_only(read_checkpoint(policy_checkpoint)), cut)
    assert cut.stat().st_size < policy_checkpoint.stat().st_size / 2
    shipped, full = PolicyController.from_checkpoint(cut), PolicyController.from_checkpoint(policy_checkpoint)
    assert shipped.training_seeds == full.training_seeds == (5, 6)
    assert decisions_of(shipped) == decisions_of(full)
    with pytest.raises(CheckpointError, match=r"learner\.optimizer"):
        read_checkpoint(cut)


def test_ship_policy_writes_a_candidate_elsewhere_and_never_replaces_it(
    policy_checkpoint: Path,  # noqa: F811
    tmp_path: Path,
    capsys,
) -> None:
    """A recorded candidate goes to an experiment's folder, not among the shipped policies;
    there a second candidate of the same name is refused (exit 2), and the first is unchanged."""
    ship_policy = load_benchmark("ship_policy", Path(__file__).parents[1] / "tools")
    out = tmp_path / "policies"
    argv = [str(policy_checkpoint), "--name", "candidate", "--command", "esper ppo --seed 5", "--out-dir", str(out)]
    shipped_before = sorted(trained.TRAINED_DIR.iterdir())
    assert ship_policy.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["candidate.json", "candidate.pt"]
    assert sorted(trained.TRAINED_DIR.iterdir()) == shipped_before
    record = json.loads((out / "candidate.json").read_text())
    assert record["command"] == "esper ppo --seed 5" and record["training_seeds"] == "5..6"
    assert PolicyController.from_checkpoint(out / "candidate.pt").training_seeds == (5, 6)
    written = (out / "candidate.pt").read_bytes(), (out / "candidate.json").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        ship_policy.main([*argv[:-4], "--command", "another", "--out-dir", str(out)])
    assert exit_info.value.code == 2
    assert "candidate.pt" in capsys.readouterr().err
    assert ((out / "candidate.pt").read_bytes(), (out / "candidate.json").read_text()) == written


def test_a_grow_run_defaults_to_a_run_directory_named_after_the_command(tiny_shapes, workdir: Path) -> None:
    assert main(["grow", "--controller", "static", *FAST]) == 0
    assert [p.name.split("-", 2)[2] for p in (workdir / "runs").iterdir()] == ["grow-shapes"]


@pytest.mark.slow
def test_a_heuristic_file_keeps_its_blueprint_order_without_the_flag(
    workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`grow --controller heuristic:FILE` ran with the task's tuned order, not the file's."""
    monkeypatch.setitem(TASKS, "shapes", plateau_task(tiny_shapes_task()))
    knobs = tmp_path / "knobs.json"
    knobs.write_text(json.dumps({"heuristic": {"blueprint_order": ["conv_light"], "warmup_epochs": 2}}))
    argv = ["grow", "--controller", f"heuristic:{knobs}", "--max-epochs", "12", "--quiet", "--seed", "3"]
    assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 0
    results = json.loads((tmp_path / "run" / "summary.json").read_text())["episode_results"]
    grown = [seed["blueprint"] for result in results for seed in result["seeds"]]
    assert grown and set(grown) == {"conv_light"}, grown


@pytest.mark.slow
def test_a_width_blueprint_in_the_order_is_grown_without_the_flag(
    workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Knobs that name a width blueprint grow it in `grow` (it was silently left out)."""
    monkeypatch.setitem(TASKS, "shapes", plateau_task(tiny_shapes_task()))
    argv = ["grow", "--heuristic.blueprint_order", "[widen_25]", "--max-epochs", "12", "--quiet", "--seed", "3"]
    assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 0
    results = json.loads((tmp_path / "run" / "summary.json").read_text())["episode_results"]
    grown = [seed["blueprint"] for result in results for seed in result["seeds"]]
    assert grown and set(grown) == {"widen_25"}, grown


def test_a_bad_blueprint_order_is_one_line_and_writes_nothing(tiny_shapes, workdir: Path, tmp_path, capsys) -> None:
    knobs = tmp_path / "knobs.json"
    knobs.write_text(json.dumps({"heuristic": {"blueprint_order": ["nope"]}}))
    run_dir = tmp_path / "run"
    check_usage_error(capsys, ["grow", "--heuristic.blueprint_order", "[nope]", "--run-dir", str(run_dir)], "'nope'")
    check_usage_error(capsys, ["grow", "--controller", f"heuristic:{knobs}", "--run-dir", str(run_dir)], "'nope'")
    assert not run_dir.exists()


class _Terminal:
    """A stderr that says a person is watching it."""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def test_the_progress_bar_shows_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from esper.runs.common import progress_bar

    monkeypatch.setattr("sys.stderr", _Terminal())
    with progress_bar(3, "epoch", quiet=False) as bar:
        assert not bar.disable
    with progress_bar(3, "epoch", quiet=True) as bar:
        assert bar.disable
    monkeypatch.setattr("sys.stderr", io.StringIO())  # a log file
    with progress_bar(3, "epoch", quiet=False) as bar:
        assert bar.disable


def test_a_grow_run_redirected_to_a_file_writes_no_bar_redraws(
    tiny_shapes, workdir: Path, tmp_path: Path, capsys
) -> None:
    """Its log holds the epoch lines and no carriage-return redraws between them."""
    run_dir = tmp_path / "logged"
    assert main(["grow", "--controller", "static", "--max-epochs", "2", "--run-dir", str(run_dir)]) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err and "epoch/s" not in captured.err
    assert "epoch" in captured.out
