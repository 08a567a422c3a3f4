"""An `esper eval` record (`eval.json`) read back, for `esper report` and the eval table."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from esper.karn.rundir import RunDirError, read_json

EVAL_KEYS = ("task", "seeds", "controllers", "test_accuracy", "paired")
"""What every eval.json holds (`esper.runs.eval_run.comparison` writes it)."""


def read_eval(path: Path) -> dict[str, Any]:
    """The record of the eval run in `path`; a `RunDirError` naming the file when it is not one."""
    file = path / "eval.json"
    report = read_json(file)
    if report is None:
        raise RunDirError(f"{str(path)!r} holds no eval.json: not an eval run")
    missing = [key for key in EVAL_KEYS if key not in report]
    if missing or not isinstance(report["controllers"], dict) or not report["controllers"]:
        raise RunDirError(f"{str(file)!r} is damaged: no {', '.join(missing) or 'controllers'}")
    for name, values in report["controllers"].items():
        if not isinstance(values, dict) or not isinstance(values.get("test_accuracy"), list):
            raise RunDirError(f"{str(file)!r} is damaged: controller {name!r} has no test_accuracy list")
    return report


def added_params(report: dict[str, Any], name: str) -> float:
    """Mean parameters over the default host: the seeds' for a growing controller, the extra width's
    for a sized static (whose host itself is larger)."""
    values = report["controllers"][name]
    default = min(min(v["host_params"]) for v in report["controllers"].values())
    return statistics.fmean(h + s - default for h, s in zip(values["host_params"], values["seed_params"], strict=True))
