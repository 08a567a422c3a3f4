"""What users expect of a Python package: a version flag, `python -m esper`, shipped type hints,
structured decisions in the run files and a clear error for a string device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import esper
from esper.leyline import BlendSchedule, Decision, LifecycleOp
from esper.scripts.cli import main
from esper.tolaria import TASKS, EnvConfig, get_task


def test_version_flag_prints_the_package_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip().startswith(f"esper {esper.__version__}")


def test_python_dash_m_esper_runs_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "esper", "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("esper ")


def test_the_package_ships_its_type_hints() -> None:
    assert (Path(esper.__file__).parent / "py.typed").is_file()


def test_a_string_device_is_refused_early_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"torch.device\('cuda'\)"):
        EnvConfig(get_task("shapes"), "cuda", 2, ("mid",), 1)  # type: ignore[arg-type]
    EnvConfig(get_task("shapes"), torch.device("cpu"), 2, ("mid",), 1)


def test_decisions_are_structured_fields() -> None:
    germinate = Decision(LifecycleOp.GERMINATE, "mid", "conv_light", BlendSchedule.SIGMOID, reason="plateau")
    assert germinate.to_json() == {
        "op": "GERMINATE",
        "slot": "mid",
        "blueprint": "conv_light",
        "schedule": "sigmoid",
        "reason": "plateau",
    }
    assert Decision.wait().to_json() == {"op": "WAIT", "slot": None, "blueprint": None, "schedule": None, "reason": ""}


@pytest.mark.slow
def test_a_heuristic_run_writes_timed_structured_epoch_events(
    tmp_path: Path, workdir: Path, shapes_task, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(TASKS, "shapes", shapes_task)
    run_dir = tmp_path / "run"
    assert main(["heuristic", "--max-epochs", "3", "--run-dir", str(run_dir), "--quiet"]) == 0
    epochs = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    epochs = [e for e in epochs if e["kind"] == "epoch"]
    assert len(epochs) == 3
    assert all(set(e["decision"]) == {"op", "slot", "blueprint", "schedule", "reason"} for e in epochs)
    times = [e["time"] for e in epochs]
    assert times == sorted(times) and times[-1] > 1.7e9
