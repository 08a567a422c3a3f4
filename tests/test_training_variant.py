"""A cheaper training variant of a task (`--host.samples_per_epoch`): every command that trains a
host draws that many training samples per epoch, and nothing else about the task changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import tiny_shapes_task
from esper.runs.eval_run import _task_data
from esper.runs.grow_run import resolve_growth
from esper.runs.ppo_run import resolve_ppo
from esper.scripts.cli import build_parser
from esper.tolaria import TASKS
from esper.tolaria.datasets import ImageData

KNOB = ["--host.samples_per_epoch", "100"]


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


def resolved_data(argv: list[str]) -> ImageData:
    args, rest = build_parser().parse_known_args(argv)
    run = resolve_ppo(args, rest) if args.command == "ppo" else resolve_growth(args, rest)
    assert isinstance(run.data, ImageData)
    return run.data


@pytest.mark.parametrize("command", ["heuristic", "grow", "ppo"])
def test_the_knob_reaches_the_data_a_command_trains_on(command: str, tiny_shapes: None, tmp_path: Path) -> None:
    plain = resolved_data([command, "--run-dir", str(tmp_path / "plain")])
    cheap = resolved_data([command, *KNOB, "--run-dir", str(tmp_path / "cheap")])
    assert plain.samples_per_epoch is None and cheap.samples_per_epoch == 100
    assert cheap.val_x.equal(plain.val_x) and cheap.test_x.equal(plain.test_x)


def test_eval_workers_load_the_variant_their_host_knobs_name(tiny_shapes: None) -> None:
    load = _task_data.__wrapped__  # uncached: the tiny task is patched in for this test only
    assert load("shapes", (("samples_per_epoch", 100),), None).samples_per_epoch == 100
    assert load("shapes", (("samples_per_epoch", None),), None).samples_per_epoch is None
