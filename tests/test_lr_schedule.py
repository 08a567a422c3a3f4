"""The episode's learning-rate schedule: a per-epoch linear warm-up, then the half cosine."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import tiny_shapes_task
from esper.kasmina.optimizers import cosine_lr_factor, seed_warmup_factor
from esper.leyline import Decision, LifecycleOp
from esper.runs.common import UsageError, check_same_run, legacy_knobs
from esper.runs.config import HostTraining, resolved_config
from esper.runs.eval_run import EVAL_DEFAULTS
from esper.scripts.cli import main
from esper.tolaria import TASKS, EnvConfig, MorphogeneticEnv, TaskSpec


@given(max_epochs=st.integers(1, 200), data=st.data())
def test_without_warm_up_the_schedule_is_the_half_cosine(max_epochs: int, data) -> None:
    epoch = data.draw(st.integers(1, max_epochs))
    assert cosine_lr_factor(epoch, max_epochs) == 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / max_epochs))


@given(max_epochs=st.integers(2, 200), data=st.data())
def test_the_warm_up_ramps_to_the_peak_then_decays(max_epochs: int, data) -> None:
    warmup = data.draw(st.integers(0, max_epochs - 1))
    factors = [cosine_lr_factor(e, max_epochs, warmup) for e in range(1, max_epochs + 1)]
    assert all(0.0 < f <= 1.0 for f in factors)
    ramp, decay = factors[:warmup], factors[warmup:]
    assert ramp == [k / (warmup + 1) for k in range(1, warmup + 1)]
    assert decay[0] == 1.0 and all(a >= b for a, b in itertools.pairwise(decay))
    assert all(r < 1.0 for r in ramp)


@pytest.mark.parametrize("warmup, max_epochs", [(-1, 10), (10, 10), (11, 10)])
def test_a_warm_up_outside_the_episode_is_refused(warmup: int, max_epochs: int) -> None:
    with pytest.raises(ValueError, match="lr_warmup_epochs"):
        cosine_lr_factor(1, max_epochs, warmup)


def warming_env(max_epochs: int, max_germinations: int) -> tuple[TaskSpec, MorphogeneticEnv]:
    """A tiny shapes env with a 2-epoch warm-up, reset and ready to step."""
    task = tiny_shapes_task()
    config = EnvConfig(
        task=task,
        device=torch.device("cpu"),
        max_epochs=max_epochs,
        enabled_slots=("early",),
        max_germinations=max_germinations,
        lr_warmup_epochs=2,
    )
    env = MorphogeneticEnv(config, task.load_data(None))
    env.reset(rng_seed=0)
    return task, env


def test_the_env_trains_its_first_epochs_on_the_ramp() -> None:
    task, env = warming_env(max_epochs=4, max_germinations=0)
    rates = []
    for _ in range(3):
        env.step(Decision.wait())  # the rate stays as the step set it until the next one
        rates.append(env.optimizers.host.param_groups[0]["lr"])
    assert rates == pytest.approx([task.host_lr / 3, 2 * task.host_lr / 3, task.host_lr])


@pytest.mark.parametrize("command", ["grow", "eval"])
def test_a_warm_up_as_long_as_the_episode_is_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    run_dir = tmp_path / "run"
    extra = ["--controllers", "static", "--seeds", "0:1"] if command == "eval" else ["--controller", "static"]
    rc = main([command, *extra, "--max-epochs", "3", "--host.lr_warmup_epochs", "3", "--run-dir", str(run_dir)])
    err = capsys.readouterr().err
    assert rc == 2 and err.splitlines() == [
        "esper: error: host.lr_warmup_epochs must be >= 0 and below the episode's 3 epochs, got 3"
    ]
    assert not run_dir.exists()


def eval_config(warmup: int | None) -> dict:
    knobs = {"host": HostTraining(lr_warmup_epochs=warmup)}
    return resolved_config("eval", {**EVAL_DEFAULTS, "controllers": ["static"], "seeds": "0:1"}, knobs)


@pytest.mark.parametrize("recorded", ["missing", "none"])
def test_a_run_recorded_before_the_warm_up_resumes_as_it_ran(recorded: str, tmp_path: Path) -> None:
    """Before 2026-11-28 a run recorded the warm-up knob unresolved (or not at all), and every
    embedded task's own warm-up was 0: such a run resumes without one, and is refused on the
    warm-up shapes has taken since."""
    before = json.loads(json.dumps(eval_config(None)))
    if recorded == "missing":
        del before["knobs"]["host"]["lr_warmup_epochs"]
    (tmp_path / "config.json").write_text(json.dumps(before))
    assert check_same_run(tmp_path, eval_config(0), frozenset())
    with pytest.raises(UsageError, match=r"other settings \(the knobs host.lr_warmup_epochs: 0 -> 3\)"):
        check_same_run(tmp_path, eval_config(3), frozenset())


def test_a_run_with_another_warm_up_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(eval_config(1)))
    assert check_same_run(tmp_path, eval_config(1), frozenset())
    with pytest.raises(UsageError, match="other settings"):
        check_same_run(tmp_path, eval_config(3), frozenset())


def test_a_checkpoint_saved_before_the_warm_up_resumes_without_one() -> None:
    saved = {"host": {"lr_warmup_epochs": None, "width": None}, "ppo": {"lr": 1e-4}}
    assert legacy_knobs(saved) == {"host": {"lr_warmup_epochs": 0, "width": None}, "ppo": {"lr": 1e-4}}
    assert legacy_knobs({"host": {"lr_warmup_epochs": 3}}) == {"host": {"lr_warmup_epochs": 3}}
    assert saved["host"]["lr_warmup_epochs"] is None  # the record itself is not changed


@pytest.mark.parametrize(
    "episode_epochs, expected", [(40, 3), (80, 6), (27, 2), (20, 1), (14, 1), (13, 0), (3, 0), (1, 0)]
)
def test_shapes_warms_up_for_the_same_share_of_any_episode(episode_epochs: int, expected: int) -> None:
    assert TASKS["shapes"].warmup_for(episode_epochs) == expected


@given(warmup=st.integers(0, 50), task_epochs=st.integers(1, 100), episode_epochs=st.integers(1, 400))
def test_a_fitted_warm_up_always_fits_its_episode(warmup: int, task_epochs: int, episode_epochs: int) -> None:
    task = dataclasses.replace(
        tiny_shapes_task(), lr_warmup_epochs=min(warmup, task_epochs - 1), max_epochs=task_epochs
    )
    fitted = task.warmup_for(episode_epochs)
    assert 0 <= fitted < episode_epochs
    assert fitted <= task.lr_warmup_epochs or episode_epochs > task_epochs
    config = EnvConfig(task, torch.device("cpu"), episode_epochs, ("early",), 0)  # never refused
    assert config.episode_lr_warmup_epochs == fitted
    assert (
        EnvConfig(task, torch.device("cpu"), episode_epochs, ("early",), 0, lr_warmup_epochs=0).episode_lr_warmup_epochs
        == 0
    )


def test_only_shapes_warms_up_by_default() -> None:
    assert {name: task.lr_warmup_epochs for name, task in TASKS.items()} == {
        "shapes": 3, "pydoc": 0, "cifar10": 0, "textfile": 0
    }  # fmt: skip


@pytest.mark.parametrize(
    "max_epochs, flag, recorded", [(6, [], 3), (2, [], 1), (2, ["--host.lr_warmup_epochs", "0"], 0)]
)
def test_a_run_records_the_warm_up_it_ran(
    max_epochs: int, flag: list[str], recorded: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task warming up for 3 of its 6 epochs warms up for 1 of a 2-epoch run, and the run
    directory says so."""
    monkeypatch.setitem(TASKS, "shapes", dataclasses.replace(tiny_shapes_task(), lr_warmup_epochs=3))
    run_dir = tmp_path / "run"
    args = [
        "grow",
        "--controller",
        "static",
        "--max-epochs",
        str(max_epochs),
        *flag,
        "--run-dir",
        str(run_dir),
        "--quiet",
    ]
    assert main(args) == 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["knobs"]["host"]["lr_warmup_epochs"] == recorded


@given(warmup=st.integers(0, 20), seed_epoch=st.integers(1, 60))
def test_a_seed_ramps_as_the_host_did_from_its_germination(warmup: int, seed_epoch: int) -> None:
    expected = seed_epoch / (warmup + 1) if seed_epoch <= warmup else 1.0
    assert seed_warmup_factor(seed_epoch, warmup) == expected
    if warmup == 0:
        assert seed_warmup_factor(seed_epoch, warmup) == 1.0  # no warm-up: no seed ramp either


def test_a_seed_germinated_after_the_host_warm_up_still_warms_up() -> None:
    task, env = warming_env(max_epochs=8, max_germinations=1)
    for _ in range(3):
        env.step(Decision.wait())  # past the host's warm-up
    seed_rates, host_rates = [], []
    for decision in (Decision(LifecycleOp.GERMINATE, "early", "conv_light"), Decision.wait(), Decision.wait()):
        env.step(decision)
        host_rates.append(env.optimizers.host.param_groups[0]["lr"])
        seed_rates.append(env.optimizers.seeds["early"].param_groups[0]["lr"])
    schedule = [cosine_lr_factor(e, 8, 2) for e in (4, 5, 6)]
    assert host_rates == pytest.approx([task.host_lr * f for f in schedule])
    assert seed_rates == pytest.approx(
        [task.seed_lr * f * r for f, r in zip(schedule, (1 / 3, 2 / 3, 1.0), strict=True)]
    )
