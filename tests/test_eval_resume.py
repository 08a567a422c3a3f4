"""`esper eval` saves each episode as it finishes: a signal stops it after the episodes running
(exit 143, one line), and `--resume last` runs only what is missing, to the same eval.json."""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import esper.runs.eval_run as evaluate
from conftest import tiny_shapes_task
from esper.runs.common import RunFailure
from esper.runs.config import python_request
from esper.runs.eval_run import EVAL_DEFAULTS, EVAL_GROUPS
from esper.runs.stopping import GracefulStop
from esper.scripts.cli import main
from esper.tolaria import TASKS
from test_cli import check_usage_error

EVAL = ["eval", "--controllers", "static", "heuristic", "--seeds", "3:5", "--max-epochs", "2", "--workers", "0"]


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


def without_seconds(report: dict) -> dict:
    report = json.loads(json.dumps(report))
    for values in report["controllers"].values():
        values.pop("seconds")
    return {k: v for k, v in report.items() if k in ("seeds", "controllers", "paired", "diagnostics")}


@pytest.mark.slow
def test_a_signal_stops_eval_and_resume_last_finishes_it_to_the_same_report(
    tiny_shapes, workdir: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert main([*EVAL, "--run-dir", str(whole)]) == 0
    real = evaluate.episode_result
    calls = []

    def signalled_after_two(job):
        result = real(job)
        calls.append(job)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` would, while an episode runs
        return result

    monkeypatch.setattr(evaluate, "episode_result", signalled_after_two)
    capsys.readouterr()
    assert main([*EVAL, "--resume", "last", "--run-dir", str(stopped)]) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("esper: eval stopped with 2 episodes") and "--resume last" in err[-1]
    assert not (stopped / "eval.json").exists()
    assert len((stopped / "episodes.jsonl").read_text().splitlines()) == 2
    monkeypatch.setattr(evaluate, "episode_result", real)
    assert main([*EVAL, "--resume", "last", "--run-dir", str(stopped)]) == 0
    assert len((stopped / "episodes.jsonl").read_text().splitlines()) == 4  # only the missing two ran
    report = json.loads((stopped / "eval.json").read_text())
    assert without_seconds(report) == without_seconds(json.loads((whole / "eval.json").read_text()))


@pytest.mark.slow
def test_eval_resume_refuses_other_settings(tiny_shapes, workdir: Path, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main([*EVAL, "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    check_usage_error(
        capsys, [*EVAL, "--max-germinations", "2", "--resume", "last", "--run-dir", str(run_dir)], "other"
    )
    check_usage_error(capsys, [*EVAL, "--resume", "last"], "--resume last needs --run-dir")


class DeadPool:
    """A pool whose worker was killed: every future fails as ProcessPoolExecutor's do then."""

    def submit(self, fn, job) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_exception(concurrent.futures.process.BrokenProcessPool("a process was terminated abruptly"))
        return future


def test_a_dead_worker_is_one_line_naming_what_is_saved(tiny_shapes, workdir: Path, tmp_path: Path) -> None:
    settings = {"controllers": ["static", "heuristic"], "seeds": "3:5", "max_epochs": 2, "workers": 2}
    run_dir = tmp_path / "run"
    where = {"run_dir": str(run_dir), "resume": None, "quiet": True}
    request = python_request("eval", EVAL_DEFAULTS, EVAL_GROUPS, settings, None, **where)
    run = evaluate.resolve_eval(request)
    run_dir.mkdir()
    with pytest.raises(RunFailure) as failure:
        evaluate.run_all(run, DeadPool(), list(run.controllers), {}, GracefulStop("the episodes running are finished"))
    message = str(failure.value)
    assert message.startswith("a worker process died") and "\n" not in message
    assert f"--resume last --run-dir {run_dir}" in message and "the 0 episodes" in message


@pytest.mark.slow
def test_sigterm_to_the_whole_process_group_stops_eval_cleanly(tmp_path: Path) -> None:
    """`timeout`, a scheduler or Ctrl-C signal every process of the group, the workers too: the
    workers leave it to the main process, which stops after the running episodes (exit 143,
    one line), where a killed worker used to break the pool into a traceback. No episode waiting
    for a worker starts after the signal."""
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "esper.scripts.cli", "eval", "--controllers", "static", "--seeds", "0:6"]
    argv += ["--max-epochs", "2", "--workers", "2", "--run-dir", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    process = subprocess.Popen(argv, env=env, start_new_session=True, **pipes)
    assert process.stdout is not None
    for line in process.stdout:  # wait for the first finished episode: the workers are busy
        if line.startswith("  static seed"):
            break
    os.killpg(process.pid, signal.SIGTERM)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 143, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("esper: eval stopped with")
    saved = len((run_dir / "episodes.jsonl").read_text().splitlines())
    # Before the signal one episode finished, or two together (each then handed its worker the
    # next); after it the two running finish and none of the queued ones starts (all 6 did once).
    assert saved <= 4, saved


def test_a_held_sized_static_of_another_width_is_refused(
    tiny_shapes, workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`matched` is held by (controller, seed) alone: a row of another width (a run directory put
    together by hand) is one line naming it, not reported under this run's width."""
    args = ["eval", "--controllers", "heuristic", "matched", "--seeds", "3:5", "--max-epochs", "2", "--workers", "0"]
    run_dir = tmp_path / "run"
    assert main([*args, "--run-dir", str(run_dir)]) == 0
    episodes = run_dir / "episodes.jsonl"
    rows = [json.loads(line) for line in episodes.read_text().splitlines()]
    matched = [r for r in rows if r["controller"] == "matched"]
    assert matched
    matched[-1]["host_params"] += 1
    episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = episodes.read_text()
    capsys.readouterr()
    assert main([*args, "--resume", "last", "--run-dir", str(run_dir)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"matched seed {matched[-1]['seed']}" in err[0] and "not width" in err[0], err
    assert episodes.read_text() == before  # nothing appended or lost
    matched[-1]["host_params"] -= 1
    episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([*args, "--resume", "last", "--run-dir", str(run_dir)]) == 0
