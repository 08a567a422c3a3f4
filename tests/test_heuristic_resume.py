"""A multi-episode heuristic run resumes from its first unfinished episode (`--resume last`), with
the same results as an uninterrupted run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_shapes_task
from esper.scripts.cli import main
from esper.tolaria import TASKS
from test_cli import check_usage_error

pytestmark = pytest.mark.slow
RUN = ["heuristic", "--episodes", "3", "--max-epochs", "16", "--quiet"]
RUN += ["--heuristic.warmup_epochs", "1", "--heuristic.plateau_patience", "1"]


@pytest.fixture
def tiny_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


def results(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    episodes = [{k: v for k, v in e.items() if k != "seconds"} for e in summary["episode_results"]]
    keys = ("final_test_accuracy_per_episode", "final_val_accuracy_per_episode", "seed_params_per_episode", "slots")
    return {"episodes": episodes, **{k: summary[k] for k in keys}}


@pytest.mark.slow
def test_a_run_killed_in_its_third_episode_resumes_to_the_same_results(tiny_tasks, workdir: Path, tmp_path) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main([*RUN, "--run-dir", str(whole)]) == 0
    assert main([*RUN, "--resume", "last", "--run-dir", str(killed)]) == 0  # no run there yet: a fresh one
    assert results(killed) == results(whole)
    assert any(e["seeds"] for e in results(whole)["episodes"]), "seeds were grown"
    # What a kill during episode 2 leaves: no record of it, no summary, a half-written event line.
    for path in (
        killed / "episodes" / "episode-0002.json",
        killed / "summary.json",
        killed / "grown" / "episode-0002.pt",
    ):
        path.unlink()
    with (killed / "events.jsonl").open("a") as f:
        f.write('{"kind": "epoch", "epi')
    assert main([*RUN, "--resume", "last", "--run-dir", str(killed)]) == 0
    assert results(killed) == results(whole)
    events = [json.loads(line) for line in (killed / "events.jsonl").read_text().splitlines()]
    ends = [e["episode"] for e in events if e["kind"] == "episode_end"]
    assert ends == [0, 1, 2]


@pytest.mark.slow
def test_resume_last_on_a_finished_run_does_nothing_and_succeeds(tiny_tasks, workdir: Path, tmp_path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main([*RUN, "--run-dir", str(run_dir)]) == 0
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*RUN, "--resume", "last", "--run-dir", str(run_dir)]) == 0
    assert f"esper: {run_dir} has finished: 3 of 3 episodes; nothing to do" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_every_episode_saved_but_no_summary_resumes_to_the_summary(tiny_tasks, workdir: Path, tmp_path) -> None:
    """Killed after its last episode was saved, before the summary: resuming writes the summary."""
    run_dir = tmp_path / "run"
    assert main([*RUN, "--run-dir", str(run_dir)]) == 0
    whole = results(run_dir)
    (run_dir / "summary.json").unlink()
    assert main([*RUN, "--resume", "last", "--run-dir", str(run_dir)]) == 0
    assert results(run_dir) == whole


@pytest.mark.slow
def test_resume_refuses_other_settings(tiny_tasks, workdir: Path, tmp_path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main([*RUN, "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    check_usage_error(
        capsys, [*RUN, "--seed", "5", "--episodes", "4", "--resume", "last", "--run-dir", str(run_dir)], "(seed)"
    )
    check_usage_error(capsys, [*RUN, "--resume", "last"], "--resume last needs --run-dir")


@pytest.mark.slow
def test_a_heuristic_process_killed_with_sigkill_resumes_to_the_same_results(tmp_path: Path) -> None:
    """The real thing, on the default task: `kill -9` after the first episode is saved."""
    import signal
    import subprocess
    import time

    from test_cli import subprocess_env

    command = [sys.executable, "-m", "esper", "heuristic", "--episodes", "3", "--max-epochs", "3", "--quiet"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run([*command, "--run-dir", str(whole)], env=subprocess_env(), check=True, capture_output=True)
    process = subprocess.Popen([*command, "--run-dir", str(killed)], env=subprocess_env(), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not (killed / "episodes" / "episode-0000.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert not (killed / "summary.json").exists()
    resumed = subprocess.run(
        [*command, "--resume", "last", "--run-dir", str(killed)], env=subprocess_env(), capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming at episode" in resumed.stdout
    assert results(killed) == results(whole)
