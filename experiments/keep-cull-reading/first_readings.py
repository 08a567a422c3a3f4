"""What a seed's first probationary reading says about its next one, from `esper eval` files.

Why: on probation the lifecycle leaves a controller one keep/cull choice of its own. FOSSILIZE is
masked at the first reading (`min_probation_epochs` 1), and at every later tick a seed reading at
or below `probation_cull_contribution` is culled by the lifecycle before the controller sees it.
So the keep/cull AUC (`esper.tamiyo.diagnostics`) labels the only CULLs a controller can make
early by the sign of the first reading, and whether culling on it is right depends on how often
that sign holds one epoch later. This script counts it, from the `keep_cull_decisions` an eval
records for each policy controller (one decision per probationary slot per epoch).

    python experiments/keep-cull-reading/first_readings.py FILE [FILE ...] [--controller NAME]

For each seed's first reading on which the controller waited (a keep score above -1/2, so P(CULL)
under one half; a greedy CULL at under one half, possible where three ops are open, would count
as the lifecycle's):
its next reading, or, where no decision on that slot followed one epoch later, that the
lifecycle culled it at the tick (its next reading was at or below zero). First readings on which
the controller culled are counted apart (their next reading was never taken), and so are those at
an episode's last epoch. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

CULLED_BY_POLICY = -0.5
"""A keep score (P(FOSSILIZE) - P(CULL)) at or below this is a greedy CULL: P(CULL) >= 1/2."""


def first_readings(decisions: list[dict[str, Any]], max_epochs: int) -> list[dict[str, Any]]:
    """One episode's first readings, in order: each with its `next` reading (None where the seed
    left probation before another decision), whether the controller culled at it, and whether
    the episode ended before a next decision could come (the reading at its last epoch)."""
    readings = {(d["slot"], d["epoch"]): d for d in decisions}
    firsts = []
    for d in decisions:
        if (d["slot"], d["epoch"] - 1) in readings:
            continue  # a later reading of a seed already counted
        after = readings.get((d["slot"], d["epoch"] + 1))
        firsts.append(
            {
                "epoch": d["epoch"],
                "slot": d["slot"],
                "first": d["contribution"],
                "next": None if after is None else after["contribution"],
                "policy_culled": d["keep_score"] <= CULLED_BY_POLICY,
                "last_epoch": d["epoch"] + 1 >= max_epochs,
            }
        )
    return firsts


def summary(firsts: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts by the first reading's sign: of the waited-on ones, how many read > 0 next."""
    out: dict[str, Any] = {}
    for label, at_or_below in (("first_at_or_below_0", True), ("first_above_0", False)):
        group = [f for f in firsts if (f["first"] <= 0) == at_or_below and not f["last_epoch"]]
        waited = [f for f in group if not f["policy_culled"]]
        out[label] = {
            "readings": len(group),
            "culled_by_the_controller": len(group) - len(waited),
            "waited": len(waited),
            "next_above_0": sum(f["next"] is not None and f["next"] > 0 for f in waited),
            "culled_by_the_lifecycle_next": sum(f["next"] is None for f in waited),
        }
    pairs = [f["next"] - f["first"] for f in firsts if f["next"] is not None]
    out["at_the_last_epoch"] = sum(f["last_epoch"] for f in firsts)
    out["mean_next_minus_first"] = sum(pairs) / len(pairs) if pairs else None
    out["pairs"] = len(pairs)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="eval.json files")
    parser.add_argument("--controller", help="one controller's name (default: each that recorded decisions)")
    args = parser.parse_args()
    firsts: dict[str, list[dict[str, Any]]] = {}
    for path in args.files:
        try:
            run = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"first_readings: error: {path}: {exc}", file=sys.stderr)
            return 2
        diagnostics = run.get("diagnostics") or {}
        names = [args.controller] if args.controller else list(diagnostics)
        for name in names:
            episodes = (diagnostics.get(name) or {}).get("keep_cull_decisions")
            if not episodes or any(e is None for e in episodes):
                where = f"{path}: {name!r}"
                print(f"first_readings: error: {where} recorded no keep_cull_decisions", file=sys.stderr)
                return 2
            for seed, decisions in zip(run["seeds"], episodes, strict=True):
                for f in first_readings(decisions, run["max_epochs"]):
                    firsts.setdefault(name, []).append({"file": path.name, "seed": seed, **f})
    if not firsts:
        print("first_readings: error: no controller in these files recorded keep_cull_decisions", file=sys.stderr)
        return 2
    print(json.dumps({name: {**summary(rows), "first_readings": rows} for name, rows in firsts.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
