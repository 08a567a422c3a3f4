"""Runs callable from Python: each command's work as a function that takes the command's settings
and returns the summary it writes.

`esper grow`, `esper heuristic`, `esper ppo` and `esper eval` parse their flags and call these; a
script, a notebook or a test calls them directly:

    import esper.runs

    summary = esper.runs.ppo(episodes=4, n_envs=2, max_epochs=3, quiet=True)
    policy = f"policy:{summary['checkpoint']}"
    report = esper.runs.evaluate(["static", policy], seeds="100:102", max_epochs=3)

Settings are the command's flags by their Python names (`--max-epochs` is `max_epochs`), with the
command's defaults; knobs are one dict per group (`knobs={"ppo": {"learning_rate": 1e-4}}`, the groups of
`esper ppo --help-knobs`). A task is a built-in name, or `package.module:function` returning a
`TaskSpec` (docs/own-task.md). Bad input raises `esper.runs.common.UsageError` with the one line
the command prints; nothing is written before it. `deterministic=True` holds for the run only:
torch's kernel settings are the caller's again when it returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from esper.runs.common import UsageError
from esper.runs.config import HEURISTIC_GROUPS, PPO_GROUPS, python_request
from esper.runs.eval_run import EVAL_DEFAULTS, EVAL_GROUPS, resolve_eval, run_eval
from esper.runs.grow_run import GROW_DEFAULTS, HEURISTIC_DEFAULTS, resolve_growth, run_growth
from esper.runs.ppo_run import DEFAULTS as PPO_DEFAULTS
from esper.runs.ppo_run import resolve_ppo, run_ppo
from esper.tolaria.devices import kernel_settings_restored

Knobs = dict[str, dict[str, Any]]


def grow(
    controller: str = "heuristic",
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
    quiet: bool = False,
    knobs: Knobs | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """`esper grow`: episodes of one controller (`heuristic`, `static`, `random`,
    `naive:BLUEPRINT@EPOCH`, `naive:SLOT=BLUEPRINT@EPOCH,...`, `policy:PATH|NAME`), each growing a
    fresh host. Returns summary.json."""
    settings = {**settings, "controller": controller}
    request = python_request("grow", GROW_DEFAULTS, HEURISTIC_GROUPS, settings, knobs, **_run(run_dir, resume, quiet))
    with kernel_settings_restored():
        return run_growth(resolve_growth(request))


def heuristic(
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
    quiet: bool = False,
    knobs: Knobs | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """`esper heuristic`: episodes of the rule-based controller. Returns summary.json."""
    run = _run(run_dir, resume, quiet)
    request = python_request("heuristic", HEURISTIC_DEFAULTS, HEURISTIC_GROUPS, settings, knobs, **run)
    with kernel_settings_restored():
        return run_growth(resolve_growth(request))


def ppo(
    *,
    run_dir: str | Path | None = None,
    resume: str | Path | None = None,
    quiet: bool = False,
    knobs: Knobs | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """`esper ppo`: learn a controller with PPO in this process (no `torchrun` group). `resume` is
    a checkpoint, a run directory, or "last" (with `run_dir`). Returns summary.json, whose
    `checkpoint` a later `evaluate` plays as `policy:PATH`."""
    run = {**_run(run_dir, False, quiet), "resume": None if resume is None else str(resume)}
    request = python_request("ppo", PPO_DEFAULTS, PPO_GROUPS, settings, knobs, **run)
    with kernel_settings_restored():
        return run_ppo(resolve_ppo(request))


def evaluate(
    controllers: list[str],
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
    quiet: bool = False,
    knobs: Knobs | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """`esper eval`: controllers compared paired on held-out seeds (`seeds="A:B"`). Returns
    eval.json: per controller its accuracies, sizes and training GFLOPs, and the paired differences."""
    settings = {**settings, "controllers": list(controllers)}
    request = python_request("eval", EVAL_DEFAULTS, EVAL_GROUPS, settings, knobs, **_run(run_dir, resume, quiet))
    with kernel_settings_restored():
        return run_eval(resolve_eval(request))


def _run(run_dir: str | Path | None, resume: bool, quiet: bool) -> dict[str, Any]:
    """Where the run goes, whether it continues one there (`--resume last`), and its progress lines."""
    return {"run_dir": None if run_dir is None else str(run_dir), "resume": "last" if resume else None, "quiet": quiet}


__all__ = ["UsageError", "evaluate", "grow", "heuristic", "ppo"]
