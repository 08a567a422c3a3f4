"""`--deterministic`: every command turns torch's deterministic kernels on in each process that
trains (eval's workers too), records the setting, and still resumes runs recorded before it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from conftest import tiny_shapes_task
from esper.runs.common import check_same_run
from esper.runs.config import resolved_config
from esper.runs.eval_run import EVAL_DEFAULTS, resolve_eval, start_worker
from esper.runs.grow_run import resolve_growth
from esper.runs.ppo_run import resolve_ppo
from esper.scripts.cli import build_parser, failure_exit_code
from esper.tolaria import TASKS


@pytest.fixture
def restore_torch_flags(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The flags are process-wide: put them back so no later test runs deterministic by accident."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic)
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic = before[1]


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


def resolve(argv: list[str]):
    args, rest = build_parser().parse_known_args(argv)
    if args.command == "ppo":
        return resolve_ppo(args, rest)
    return resolve_eval(args, rest) if args.command == "eval" else resolve_growth(args, rest)


@pytest.mark.parametrize(
    "argv",
    [["heuristic"], ["grow", "--controller", "static"], ["ppo"], ["eval", "--controllers", "static", "--seeds", "0:1"]],
)
def test_the_flag_turns_the_kernels_on_and_is_recorded(
    argv: list[str], tiny_shapes: None, restore_torch_flags: None, tmp_path: Path
) -> None:
    torch.use_deterministic_algorithms(False)
    run = resolve([*argv, "--deterministic", "--run-dir", str(tmp_path / "run")])
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    settings = run.settings if argv[0] == "ppo" else run.config["settings"]
    assert settings["deterministic"] is True


def test_without_the_flag_nothing_changes(tiny_shapes: None, restore_torch_flags: None, tmp_path: Path) -> None:
    torch.use_deterministic_algorithms(False)
    run = resolve(["heuristic", "--run-dir", str(tmp_path / "run")])
    assert not torch.are_deterministic_algorithms_enabled()
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    assert run.config["settings"]["deterministic"] is None


@pytest.mark.parametrize("deterministic", [True, False])
def test_an_eval_worker_takes_the_flag(deterministic: bool, restore_torch_flags: None, monkeypatch) -> None:
    monkeypatch.setattr("signal.signal", lambda *a: None)  # a worker ignores Ctrl-C; this process must not
    torch.use_deterministic_algorithms(False)
    start_worker(deterministic)
    assert torch.are_deterministic_algorithms_enabled() is deterministic


def test_a_run_recorded_before_the_flag_still_resumes(tmp_path: Path) -> None:
    config = resolved_config("eval", {**EVAL_DEFAULTS, "controllers": ["static"], "seeds": "0:1"}, {})
    before = json.loads(json.dumps(config))
    del before["settings"]["deterministic"]
    (tmp_path / "config.json").write_text(json.dumps(before))
    assert check_same_run(tmp_path, config, frozenset())


def test_an_op_without_a_deterministic_kernel_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    exc = RuntimeError(
        "adaptive_avg_pool2d_backward_cuda does not have a deterministic implementation, but you set "
        "'torch.use_deterministic_algorithms(True)'.\nYou can turn off determinism just for this operation..."
    )
    assert failure_exit_code(exc, is_main=True) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("esper: error: --deterministic: adaptive_avg_pool2d_backward_cuda")
    assert failure_exit_code(RuntimeError("some other bug"), is_main=True) is None
