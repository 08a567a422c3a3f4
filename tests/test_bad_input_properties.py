"""Property-based: every knob of every group, and every numeric setting, given a value of the
wrong type or out of its range, from a flag or from a config file, is one line on stderr with
exit code 2, and no run directory is created."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tiny_shapes_task
from esper.runs.config import HEURISTIC_GROUPS, PPO_GROUPS
from esper.scripts.cli import main
from esper.tolaria import TASKS

PREFIX = "esper: error: "


def numeric_knobs(groups) -> list[tuple[str, str, type]]:
    """(group, knob, int or float) for every numeric knob of `groups`."""
    found = []
    for group, make in groups.items():
        instance = make()
        hints = typing.get_type_hints(type(instance))
        for field in dataclasses.fields(instance):
            kind = hints.get(field.name)
            base = next((t for t in (int, float) if kind is t or t in typing.get_args(kind)), None)
            if base is not None and kind is not bool:
                found.append((group, field.name, base))
    return found


HEURISTIC_KNOBS = numeric_knobs(HEURISTIC_GROUPS)
PPO_KNOBS = numeric_knobs(PPO_GROUPS)
NOT_A_NUMBER = st.sampled_from(["abc", "1e", "--", "[1]", "{}", "one", "0x"])
NOT_AN_INTEGER = st.one_of(NOT_A_NUMBER, st.sampled_from(["1.5", "2.25", "nan", "inf"]))


@pytest.fixture(autouse=True)
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


def assert_one_line_and_nothing_written(rc: int, err: str, run_dir: Path) -> None:
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), err
    assert "Traceback" not in err
    assert not run_dir.exists()


SETTINGS = dict(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@settings(**SETTINGS)
@given(knob=st.sampled_from(HEURISTIC_KNOBS), data=st.data())
def test_a_bad_knob_flag_of_heuristic_is_one_line(knob, data, tmp_path: Path, capsys) -> None:
    group, name, base = knob
    value = data.draw(NOT_AN_INTEGER if base is int else NOT_A_NUMBER)
    run_dir = tmp_path / "run"
    rc = main(["heuristic", "--max-epochs", "1", "--quiet", "--run-dir", str(run_dir), f"--{group}.{name}", value])
    assert_one_line_and_nothing_written(rc, capsys.readouterr().err, run_dir)


@settings(**SETTINGS)
@given(knob=st.sampled_from(PPO_KNOBS), data=st.data())
def test_a_bad_knob_in_a_ppo_config_file_is_one_line(knob, data, tmp_path: Path, capsys) -> None:
    group, name, base = knob
    value = data.draw(NOT_AN_INTEGER if base is int else NOT_A_NUMBER)
    config, run_dir = tmp_path / "run.json", tmp_path / "run"
    config.write_text(json.dumps({group: {name: value}}))
    argv = ["ppo", "--episodes", "2", "--n-envs", "2", "--quiet", "--config", str(config), "--run-dir", str(run_dir)]
    rc = main(argv)
    assert_one_line_and_nothing_written(rc, capsys.readouterr().err, run_dir)


BAD_SETTINGS = {
    "--episodes": st.one_of(st.integers(max_value=0).map(str), NOT_AN_INTEGER),
    "--max-epochs": st.one_of(st.integers(max_value=0).map(str), NOT_AN_INTEGER),
    "--max-germinations": st.one_of(st.integers(max_value=-1).map(str), NOT_AN_INTEGER),
    "--seed": st.one_of(st.integers(max_value=-1).map(str), st.integers(min_value=2**64).map(str), NOT_AN_INTEGER),
    "--task": st.text("abcxyz_", min_size=1, max_size=8).filter(lambda t: t not in TASKS),
    "--device": st.sampled_from(["quantum", "cuda:-1", "tpu", "cpu:x"]),
    "--slots": st.sampled_from(["nowhere", "early early", "s99"]),
}


@settings(**SETTINGS)
@given(setting=st.sampled_from(sorted(BAD_SETTINGS)), data=st.data())
def test_a_bad_setting_of_heuristic_is_one_line(setting: str, data, tmp_path: Path, capsys) -> None:
    value = data.draw(BAD_SETTINGS[setting])
    run_dir = tmp_path / "run"
    rc = main(["heuristic", "--quiet", "--run-dir", str(run_dir), f"{setting}={value}"])
    assert_one_line_and_nothing_written(rc, capsys.readouterr().err, run_dir)
