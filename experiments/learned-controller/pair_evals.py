"""Pair two controllers that ran in separate `esper eval` runs on the same seeds.

A new policy is compared with a baseline whose episodes an earlier eval already ran: an episode
depends on its controller, its seed and the code, not on which other controllers share its eval,
so the two runs pair seed by seed. The runs must agree on the seeds, the task, the episode length,
the torch build and the CPU's kernels (`cpu_capability`): episodes of different machine types
differ. Prints JSON; a disagreement is one line and exit code 2.

    python experiments/learned-controller/pair_evals.py --a EVAL_A.json policy:PATH --b EVAL_B.json heuristic
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from esper.karn.stats import estimate, paired_difference

MUST_AGREE = ("seeds", "task", "max_epochs", "torch", "cpu_capability")


class PairingError(Exception):
    """Two eval runs that cannot be paired, or a controller a run does not hold."""


def controller_of(run: dict, name: str, path: str) -> dict:
    if name not in run["controllers"]:
        raise PairingError(f"pair_evals: {path} holds no {name!r}; it holds: {' '.join(run['controllers'])}")
    return run["controllers"][name]


def pair(a_file: str, a_name: str, b_file: str, b_name: str) -> dict:
    runs = [json.loads(Path(path).read_text(encoding="utf-8")) for path in (a_file, b_file)]
    for key in MUST_AGREE:
        if runs[0].get(key) != runs[1].get(key):
            raise PairingError(
                f"pair_evals: {key} differs ({a_file}: {runs[0].get(key)!r}, {b_file}: {runs[1].get(key)!r}); "
                f"pair only runs that agree on {', '.join(MUST_AGREE)}"
            )
    a, b = controller_of(runs[0], a_name, a_file), controller_of(runs[1], b_name, b_file)
    return {
        "a": a_name,
        "b": b_name,
        "files": {"a": a_file, "b": b_file},
        "seeds": runs[0]["seeds"],
        "n_seeds": len(runs[0]["seeds"]),
        "a_minus_b_test_accuracy": paired_difference(a["test_accuracy"], b["test_accuracy"]).to_json(),
        "a_minus_b_selection_accuracy": paired_difference(a["val_accuracy"], b["val_accuracy"]).to_json(),
        "a_ahead_on": sum(x > y for x, y in zip(a["test_accuracy"], b["test_accuracy"], strict=True)),
        "a_test_accuracy": estimate(a["test_accuracy"]).to_json(),
        "b_test_accuracy": estimate(b["test_accuracy"]).to_json(),
        "a_mean_added_params": round(statistics.fmean(a["seed_params"]), 1),
        "b_mean_added_params": round(statistics.fmean(b["seed_params"]), 1),
        "a_mean_train_gflops": round(statistics.fmean(a["train_gflops"]), 1),
        "b_mean_train_gflops": round(statistics.fmean(b["train_gflops"]), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a", nargs=2, required=True, metavar=("EVAL_JSON", "CONTROLLER"), help="the controller")
    parser.add_argument("--b", nargs=2, required=True, metavar=("EVAL_JSON", "CONTROLLER"), help="the baseline")
    args = parser.parse_args(argv)
    try:
        print(json.dumps(pair(*args.a, *args.b), indent=1))
    except (PairingError, OSError, json.JSONDecodeError) as error:
        print(error if isinstance(error, PairingError) else f"pair_evals: cannot read an eval.json: {error}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
