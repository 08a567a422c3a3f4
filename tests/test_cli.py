"""The `esper heuristic` command line: one-line errors with exit code 2, and real runs' outputs."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import tree
from esper.kasmina import Topology
from esper.kasmina.blueprints import BLUEPRINTS, WIDTH_BLUEPRINTS
from esper.scripts.cli import main
from esper.tamiyo import tuned_heuristic
from esper.tolaria import DATA_DIR_ENV, TASKS, TaskSpec
from esper.tolaria.datasets import CIFAR10_TEST_FILE, CIFAR10_TRAIN_FILES

PREFIX = "esper: error: "


def write_cifar_folder(parent: Path) -> Path:
    root = parent / "cifar-10-batches-py"
    root.mkdir(parents=True)
    for name in (*CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE):
        entry = {b"data": np.full((2, 3072), 7, dtype=np.uint8), b"labels": [1, 2]}
        (root / name).write_bytes(pickle.dumps(entry, protocol=2))
    return root


def check_usage_error(capsys: pytest.CaptureFixture[str], argv: list[str], *fragments: str) -> str:
    """`main(argv)` fails with exit code 2 and exactly one stderr line naming `fragments`."""
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""
    assert err.endswith("\n")
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(PREFIX)
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]


# --------------------------------------------------------------------------- bad input
BAD_INPUTS = {
    "unknown task": (["--task", "bogus"], ["'bogus'", "shapes", "pydoc", "cifar10", "textfile"]),
    "unknown slot": (["--slots", "early", "middle"], ["'middle'", "early mid late"]),
    "unknown blueprint": (
        ["--blueprints", "conv_light", "bogus"],
        ["'bogus'", "conv_light", "bottleneck"],
    ),
    "transformer blueprint for cnn": (
        ["--blueprints", "lora"],
        ["'lora'", "transformer", "conv_light"],
    ),
    "cnn blueprint for transformer": (
        ["--task", "pydoc", "--blueprints", "conv_heavy"],
        ["'conv_heavy'", "mlp"],
    ),
    "width blueprint the layer refuses": (
        ["--blueprints", "widen_25", "--host.width", "1"],
        ["--blueprints widen_25", "slot 'early'", "less than one unit"],
    ),
    "width blueprint of the heuristic's order the layer refuses": (
        ["--heuristic.blueprint_order", "[widen_25, conv_heavy]", "--host.width", "1"],
        ["--heuristic.blueprint_order widen_25", "slot 'early'", "less than one unit"],
    ),
    "width blueprint the layer refuses, for the policy": (
        ["--blueprints", "conv_light", "widen_25", "--host.width", "1"],
        ["--blueprints widen_25", "slot 'early'", "less than one unit"],
    ),
    "heuristic slots knob outside the run's slots": (
        ["--slots", "early", "mid", "--heuristic.slots", "[mid, late]"],
        ["--heuristic.slots", "'late'", "enabled: early mid"],
    ),
    "heuristic slots knob outside the run's slots, for the policy's teacher": (
        ["--slots", "early", "--heuristic.slots", "[mid]"],
        ["--heuristic.slots", "'mid'", "enabled: early"],
    ),
    "malformed device": (["--device", "gpu0"], ["'gpu0'", "cpu"]),
    "zero episodes": (["--episodes", "0"], ["--episodes", "0"]),
    "zero max epochs": (["--max-epochs", "0"], ["--max-epochs", "0"]),
    "negative max germinations": (["--max-germinations", "-1"], ["--max-germinations", "-1"]),
    "embedded task with data dir": (["--data-dir", "/some/folder"], ["shapes", "/some/folder"]),
    "real task without data dir": (["--task", "cifar10"], ["cifar10", "--data-dir", DATA_DIR_ENV]),
    "samples per epoch below a batch": (["--host.samples_per_epoch", "50"], ["host.samples_per_epoch 50", "100"]),
    "warm-up as long as the episode": (
        ["--host.lr_warmup_epochs", "3", "--max-epochs", "3"],
        ["host.lr_warmup_epochs", "3 epochs", "got 3"],
    ),
    "samples per epoch above the pool": (
        ["--host.samples_per_epoch", "60000"],
        ["host.samples_per_epoch", "60000", "50000 training images"],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_writes_nothing(
    case: str, workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra, fragments = BAD_INPUTS[case]
    run_dir = tmp_path / "run"
    command = "ppo" if "policy" in case else "heuristic"
    check_usage_error(capsys, [command, *extra, "--run-dir", str(run_dir)], *fragments)
    assert not run_dir.exists()
    assert tree(workdir) == {}


def test_cuda_on_cpu_only_machine(
    workdir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run_dir = tmp_path / "run"
    line = check_usage_error(capsys, ["heuristic", "--device", "cuda:0", "--run-dir", str(run_dir)], "'cuda:0'", "CUDA")
    assert "available devices: cpu" in line
    assert not run_dir.exists()
    assert tree(workdir) == {}


ARGPARSE_ERRORS = {
    "unknown flag": (["heuristic", "--bogus-flag"], ["--bogus-flag"]),
    "missing subcommand": (["--version-typo"], ["required"]),
    "unknown subcommand": (["sprout"], ["'sprout'", "heuristic", "grow"]),
    "non-integer episodes": (["heuristic", "--episodes", "two"], ["--episodes", "'two'"]),
    "non-integer max germinations": (["heuristic", "--max-germinations", "1.5"], ["--max-germinations", "'1.5'"]),
    "slots without a value": (["heuristic", "--slots"], ["--slots"]),
}


@pytest.mark.parametrize("case", list(ARGPARSE_ERRORS))
def test_argparse_errors_are_one_line(case: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, fragments = ARGPARSE_ERRORS[case]
    check_usage_error(capsys, argv, *fragments)
    assert tree(workdir) == {}


def test_cifar10_missing_data_dir(workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no_cifar_here"
    run_dir = tmp_path / "run"
    check_usage_error(
        capsys,
        ["heuristic", "--task", "cifar10", "--data-dir", str(missing), "--run-dir", str(run_dir)],
        str(missing),
    )
    assert not run_dir.exists()
    assert tree(workdir) == {}


def test_cifar10_missing_dir_from_env(
    workdir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = tmp_path / "env_cifar"
    monkeypatch.setenv(DATA_DIR_ENV, str(missing))
    run_dir = tmp_path / "run"
    check_usage_error(capsys, ["heuristic", "--task", "cifar10", "--run-dir", str(run_dir)], str(missing))
    assert not run_dir.exists()


@pytest.mark.parametrize("broken", ["data_batch_4", CIFAR10_TEST_FILE])
def test_cifar10_corrupt_file(broken: str, workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_cifar_folder(tmp_path / "data")
    (root / broken).write_bytes(b"\x80\x02garbage, not a pickle")
    before = tree(root)
    run_dir = tmp_path / "run"
    check_usage_error(
        capsys,
        [
            "heuristic",
            "--task",
            "cifar10",
            "--data-dir",
            str(root.parent),
            "--run-dir",
            str(run_dir),
        ],
        str(root / broken),
        "corrupt",
    )
    assert not run_dir.exists()
    assert tree(root) == before
    assert tree(workdir) == {}


@pytest.mark.slow
def test_cifar10_run_reports_three_splits(workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder in the real format: the selection split is carved from the training batches (the
    last tenth), and `test_batch` is the test split, reported once per episode."""
    root = tmp_path / "data" / "cifar-10-batches-py"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in (*((f, 40) for f in CIFAR10_TRAIN_FILES), (CIFAR10_TEST_FILE, 30)):
        entry = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": rng.integers(0, 10, n).tolist()}
        (root / name).write_bytes(pickle.dumps(entry, protocol=2))
    run_dir = tmp_path / "run"
    argv = ["heuristic", "--task", "cifar10", "--data-dir", str(root.parent), "--max-epochs", "1"]
    assert main([*argv, "--run-dir", str(run_dir), "--quiet"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["splits"] == {"train": 180, "val": 20, "test": 30}
    assert 0.0 <= summary["final_test_accuracy"] <= 100.0
    assert summary["episode_results"][0]["final_test_accuracy"] == summary["final_test_accuracy"]


def test_textfile_missing_path(workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "stories"
    run_dir = tmp_path / "run"
    check_usage_error(
        capsys,
        ["heuristic", "--task", "textfile", "--data-dir", str(missing), "--run-dir", str(run_dir)],
        str(missing),
    )
    assert not run_dir.exists()


@pytest.mark.parametrize("existing", ["summary.json", "events.jsonl"])
def test_existing_run_dir_is_left_alone(
    existing: str, workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "old_run"
    run_dir.mkdir()
    (run_dir / existing).write_text('{"final_val_accuracy": 42.0}\n')
    before = tree(run_dir)
    check_usage_error(capsys, ["heuristic", "--run-dir", str(run_dir)], str(run_dir), existing)
    assert tree(run_dir) == before


def test_an_occupied_run_dir_names_the_command_that_owns_it(
    workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "ppo_run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text('{"command": "ppo", "settings": {}, "knobs": {}}')
    before = tree(run_dir)
    check_usage_error(capsys, ["grow", "--run-dir", str(run_dir)], "holds an `esper ppo` run", "config.json")
    assert tree(run_dir) == before


def test_run_dir_that_is_a_file(workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "a_file"
    target.write_text("keep me")
    check_usage_error(capsys, ["heuristic", "--run-dir", str(target)], str(target))
    assert target.read_text() == "keep me"


def test_run_dir_inside_a_file(workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "a_file"
    target.write_text("keep me")
    check_usage_error(capsys, ["heuristic", "--run-dir", str(target / "run")], str(target), "not a folder")
    assert target.read_text() == "keep me"


def subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != DATA_DIR_ENV}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.slow
def test_subprocess_bad_input_exit_code_and_no_traceback(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "esper.scripts.cli",
            "heuristic",
            "--device",
            "gpu0",
            "--run-dir",
            str(run_dir),
        ],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{PREFIX}malformed device 'gpu0'")
    assert "available devices: cpu" in lines[0]
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- successful runs
def read_events(path: Path) -> list[dict]:
    lines = path.read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    assert all(isinstance(e, dict) and isinstance(e.get("kind"), str) for e in events)
    return events


def check_summary_shape(summary: dict, task: str) -> None:
    assert summary["task"] == task
    assert isinstance(summary["final_val_accuracy"], float) and 0.0 <= summary["final_val_accuracy"] <= 100.0
    assert isinstance(summary["host_params"], int) and summary["host_params"] > 0
    assert summary["seed_params"] >= 0
    slots = summary["slots"]
    assert isinstance(slots, dict)
    assert list(slots) == ["early", "mid", "late"]
    for entries in slots.values():
        assert isinstance(entries, list)
        for entry in entries:
            check_seed_entry(entry, "cnn")


def check_seed_entry(entry: dict, topology: str) -> None:
    kind = Topology(topology)
    allowed = {*BLUEPRINTS[kind], *WIDTH_BLUEPRINTS[kind]}  # residual and width blueprints
    assert entry["blueprint"] in allowed
    history = entry["stage_history"]
    assert isinstance(history, list) and history
    for pair in history:
        assert isinstance(pair, list) and len(pair) == 2
        epoch, stage = pair
        assert isinstance(epoch, int) and isinstance(stage, str)
    epochs = [e for e, _ in history]
    assert epochs == sorted(epochs)
    assert history[0][1] == "GERMINATED"
    assert entry["final_stage"] == history[-1][1]


@pytest.mark.slow
def test_subprocess_heuristic_run_on_default_task(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "esper.scripts.cli",
            "heuristic",
            "--max-epochs",
            "3",
            "--run-dir",
            str(run_dir),
        ],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "esper: error" not in result.stderr
    assert "3/3" not in result.stderr and "epoch/s" not in result.stderr  # no bar: stderr is a pipe, not a terminal
    out = result.stdout.splitlines()
    assert out[0].startswith("esper heuristic: task shapes")
    progress = [line for line in out if line.startswith("[episode 0 epoch")]
    assert [line.split("]")[0] for line in progress] == [f"[episode 0 epoch {e:>3}" for e in (1, 2, 3)]
    assert all("val_acc" in line for line in progress)
    assert any(line.startswith("final test accuracy") for line in out)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["splits"] == {"train": 50_000, "val": 2000, "test": 10_000}
    assert 0.0 <= summary["final_test_accuracy"] <= 100.0
    files = ["config.json", "episodes", "events.jsonl", "grown", "summary.json", "tensorboard"]
    assert sorted(p.name for p in run_dir.iterdir()) == files
    config = json.loads((run_dir / "config.json").read_text())
    assert config["command_line"][-4:] == ["--max-epochs", "3", "--run-dir", str(run_dir)]
    tuned = tuned_heuristic("shapes")  # the task's tuned knobs are the run's defaults
    assert config["settings"]["max_epochs"] == 3
    assert config["knobs"]["heuristic"]["fossilize_threshold"] == tuned.fossilize_threshold
    assert config["knobs"]["gates"]["blend_epochs"] == 3 and config["esper"]

    summary = json.loads((run_dir / "summary.json").read_text())
    check_summary_shape(summary, "shapes")
    assert summary["config"]["max_epochs"] == 3

    events = read_events(run_dir / "events.jsonl")
    epochs = [e for e in events if e["kind"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    assert all(e["episode"] == 0 for e in epochs)
    assert epochs[-1]["val_accuracy"] == pytest.approx(summary["final_val_accuracy"])
    assert events[-1]["kind"] == "episode_end"
    assert {"early", "mid", "late"} == {s["slot"] for s in epochs[0]["slots"]}


def plateau_task(task: TaskSpec) -> TaskSpec:
    """The tiny shapes task with a frozen host: accuracy plateaus at once, so the heuristic
    controller germinates as soon as warm-up allows."""
    return dataclasses.replace(task, host_lr=0.0)


@pytest.mark.slow
def test_in_process_run_records_seeds(
    shapes_task: TaskSpec,
    workdir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(TASKS, "shapes", plateau_task(shapes_task))
    run_dir = tmp_path / "run"
    argv = ["heuristic", "--max-epochs", "12", "--episodes", "2", "--heuristic.warmup_epochs", "2"]
    assert main([*argv, "--run-dir", str(run_dir)]) == 0  # a short warm-up: it grows in 12 epochs
    out, err = capsys.readouterr()
    assert "24/24" not in err and "error" not in err and "Traceback" not in err  # no bar off a terminal
    assert sum(line.startswith("[episode 0 epoch") and "val_acc" in line for line in out.splitlines()) == 12
    assert sum(line.startswith("[episode 1 epoch") and "val_acc" in line for line in out.splitlines()) == 12

    summary = json.loads((run_dir / "summary.json").read_text())
    check_summary_shape(summary, "shapes")
    seeds = [entry for entries in summary["slots"].values() for entry in entries]
    assert seeds, "a frozen host should plateau and get a seed"
    assert summary["slots"]["early"], "the first germination goes to the first slot in host order"
    events = read_events(run_dir / "events.jsonl")
    germinations = [e for e in events if e["kind"] == "stage_change" and e["target"] == "GERMINATED"]
    assert sorted(e["seed_id"] for e in germinations) == sorted(s["seed_id"] for s in seeds)
    assert len({s["seed_id"] for s in seeds}) == len(seeds), "seed ids are unique across the env's episodes"
    assert {s["episode"] for s in seeds} == {0, 1}
    per_episode = summary["final_val_accuracy_per_episode"]
    assert len(per_episode) == 2 and summary["final_val_accuracy"] == pytest.approx(sum(per_episode) / 2)
    umask = os.umask(0)
    os.umask(umask)
    assert (run_dir / "summary.json").stat().st_mode & 0o777 == 0o666 & ~umask, "mkstemp's 0600 must not leak"
    assert tree(workdir) == {}


def test_in_process_run_with_no_seed_budget(
    shapes_task: TaskSpec,
    workdir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(TASKS, "shapes", plateau_task(shapes_task))
    run_dir = tmp_path / "run"
    assert main(["heuristic", "--max-epochs", "5", "--max-germinations", "0", "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["slots"] == {"early": [], "mid": [], "late": []}
    assert summary["seed_params"] == 0
    events = read_events(run_dir / "events.jsonl")
    assert not [e for e in events if e["kind"] == "stage_change"]
    epochs = [e for e in events if e["kind"] == "epoch"]
    assert len(epochs) == 5
    assert all(s["stage"] == "DORMANT" for e in epochs for s in e["slots"])


@pytest.mark.slow
def test_in_process_run_quiet_and_restricted_slots(
    shapes_task: TaskSpec,
    workdir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(TASKS, "shapes", plateau_task(shapes_task))
    run_dir = tmp_path / "run"
    assert (
        main(
            [
                "heuristic",
                "--max-epochs",
                "12",
                "--slots",
                "late",
                "--quiet",
                "--run-dir",
                str(run_dir),
            ]
        )
        == 0
    )
    out, _ = capsys.readouterr()
    assert not [line for line in out.splitlines() if line.startswith("[episode")]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["config"]["slots"] == ["late"]
    assert summary["slots"]["early"] == [] and summary["slots"]["mid"] == []
    assert summary["slots"]["late"], "the only enabled slot should get the seed"
    assert len([e for e in read_events(run_dir / "events.jsonl") if e["kind"] == "epoch"]) == 12


def test_unreadable_data_folder_and_run_dir(
    workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    real_is_dir, real_exists = Path.is_dir, Path.exists

    def denied(real):
        def check(self: Path) -> bool:
            if locked in (self, *self.parents):
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        return check

    monkeypatch.setattr(Path, "is_dir", denied(real_is_dir))
    monkeypatch.setattr(Path, "exists", denied(real_exists))
    check_usage_error(capsys, ["heuristic", "--task", "cifar10", "--data-dir", str(locked)], "Permission denied")
    check_usage_error(capsys, ["heuristic", "--run-dir", str(locked / "run")], "Permission denied")


def test_esper_alone_lists_its_commands(capsys) -> None:
    """It printed "the following arguments are required: command" and no command."""
    assert main([]) == 0
    out = capsys.readouterr().out
    for command in ("heuristic", "grow", "ppo", "eval", "report", "watch"):
        assert command in out


@pytest.mark.parametrize("command", ["heuristic", "grow", "ppo", "eval"])
def test_threads_out_of_range_is_refused(capsys, command: str) -> None:
    check_usage_error(capsys, [command, "--threads", "0"], "--threads 0", "choose from 1 to")
    check_usage_error(capsys, [command, "--threads", "100000"], "--threads 100000", "choose from 1 to")


def test_eval_refuses_a_process_per_episode_beyond_reason(capsys, tmp_path) -> None:
    argv = [
        "eval",
        "--controllers",
        "static",
        "--seeds",
        "0:2",
        "--workers",
        "100000",
        "--run-dir",
        str(tmp_path / "e"),
    ]
    check_usage_error(capsys, argv, "--workers 100000", "at most")
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize(
    ("command", "fragments"),
    [
        (["report"], ("eval.json", "is damaged")),  # report draws an eval run, from a whole eval.json
        (["watch", "--once"], ("is an eval run", "eval.json")),
    ],
)
def test_report_and_watch_say_an_eval_run_is_an_eval_run(capsys, tmp_path, command, fragments) -> None:
    """`report` said an eval run had "no epoch yet"; `watch` showed it as running."""
    run_dir = tmp_path / "eval-run"
    run_dir.mkdir()
    (run_dir / "eval.json").write_text("{}")
    (run_dir / "config.json").write_text("{}")
    check_usage_error(capsys, [command[0], str(run_dir), *command[1:]], *fragments)
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json", "eval.json"]


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("max_epochs = 2.5", ["max_epochs", "invalid int value: '2.5'"]),
        ('episodes = "many"', ["episodes", "invalid int value: 'many'"]),
        ("seed = 1.5", ["seed", "invalid int value: '1.5'"]),
        ("episodes = true", ["episodes takes what --episodes takes, not True"]),
        ('device = ["cpu", "cpu"]', ["device takes one value"]),
    ],
)
def test_a_config_file_is_held_to_the_flags_types(capsys, tmp_path, text: str, fragments: list[str]) -> None:
    """These were tracebacks, or (max_epochs = 2.5) a run of 3 epochs recorded as 2.5."""
    config = tmp_path / "run.toml"
    config.write_text(text + "\n")
    check_usage_error(capsys, ["heuristic", "--config", str(config), "--run-dir", str(tmp_path / "r")], *fragments)
    assert not (tmp_path / "r").exists()


def test_a_config_file_setting_reads_as_its_flag_would() -> None:
    """`slots = "early"` is one slot (it was read letter by letter: "unknown slot 'e'")."""
    from esper.runs.config import typed_settings
    from esper.scripts.cli import build_parser

    args, _ = build_parser().parse_known_args(["grow"])
    typed = typed_settings({"slots": "early", "max_epochs": 3, "sample": True}, args.settings_parser, "f")
    assert typed == {"slots": ["early"], "max_epochs": 3, "sample": True}


@pytest.mark.parametrize(
    ("command", "text", "flags", "fragments"),
    [
        ("heuristic", '[heuristic]\nwarmup_epochs = "x"', [], ["[heuristic] warmup_epochs takes int, got 'x'"]),
        ("heuristic", '[host]\nwidth = "wide"', [], ["[host] width takes int or none, got 'wide'"]),
        ("heuristic", "", ["--governor.blowup_factor", "-1"], ["blowup_factor must be > 1"]),
        ("ppo", "", ["--ppo.learning_rate", "-1"], ["learning_rate must be >= 0"]),
    ],
)
def test_knobs_are_held_to_their_types_and_ranges(
    capsys, tmp_path, command: str, text: str, flags: list[str], fragments: list[str]
) -> None:
    """A wrong knob type in a file was a traceback after the run directory was written; a
    negative blow-up factor was accepted; a negative PPO learning rate crashed in AdamW."""
    config = tmp_path / "run.toml"
    config.write_text(text + "\n")
    run_dir = tmp_path / "r"
    check_usage_error(capsys, [command, "--config", str(config), *flags, "--run-dir", str(run_dir)], *fragments)
    assert not run_dir.exists()


def test_eval_refuses_more_seeds_than_it_can_hold(capsys, tmp_path) -> None:
    """`--seeds 0:1000000000000` was a MemoryError traceback."""
    argv = ["eval", "--controllers", "static", "--seeds", "0:1000000000000", "--run-dir", str(tmp_path / "e")]
    check_usage_error(capsys, argv, "--seeds '0:1000000000000'", "at most 100,000 seeds")
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("events.jsonl", b'{"kind": "epoch"}\n\xff\xfe not text\n', "is not UTF-8 text"),
        ("summary.json", b'{"episodes": [', "summary.json' is damaged"),
        ("config.json", b"\xff", "config.json' is damaged"),
    ],
)
@pytest.mark.parametrize("command", [["report"], ["watch", "--once"]])
def test_a_damaged_run_file_is_one_line(capsys, tmp_path, name: str, content: bytes, fragment: str, command) -> None:
    """Non-UTF-8 events and a truncated summary were tracebacks in report and watch."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_text("")
    (run_dir / name).write_bytes(content)
    check_usage_error(capsys, [command[0], str(run_dir), *command[1:]], fragment)


def test_a_lone_double_dash_as_a_value_is_one_line(workdir: Path, capsys) -> None:
    """argparse hands `--episodes=--` over as an empty list; it was a TypeError traceback."""
    check_usage_error(capsys, ["heuristic", "--episodes=--", "--run-dir", "r"], "--episodes", "expected one value")
    assert not Path("r").exists()


@pytest.mark.parametrize("command", ["heuristic", "grow"])
def test_a_bad_pin_from_the_config_file_names_the_file(
    command: str, workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The heuristic's pins read from `--config` are the file's, not a `--heuristic.` flag's."""
    config = tmp_path / "run.toml"
    config.write_text('[heuristic]\nslot_blueprints = ["late=widen_25"]\n')
    run_dir = tmp_path / "run"
    argv = [command, "--config", str(config), "--slots", "early", "--run-dir", str(run_dir)]
    line = check_usage_error(capsys, argv, f"--config {str(config)!r}: heuristic.slot", "'late' is not a slot")
    assert "--heuristic." not in line
    assert not run_dir.exists()
