"""Gather the `esper eval` runs of one training-recipe comparison into one record.

Each arm is one eval run directory (its `config.json`, `eval.json` and `episodes.jsonl`) of a
single controller on the same seeds; arms may differ in their host knobs (`--host.host_lr`,
`--host.lr_warmup_epochs`, `--host.width`), which a pairing across evals by `pair_evals.py`
would not show. The record keeps every arm's command line, its knobs, its episodes and each
requested pair's paired difference on the selection and the test split. Runs of different seeds,
tasks, episode lengths, torch builds or CPU kernels are refused (one line, exit code 2).

    python experiments/lr-warmup/collect.py --arm NAME RUN_DIR CONTROLLER [--arm ...] \
        --pair A B [--pair ...] --commit NAME COMMIT [...] [--host-variant NAME ...] \
        --out RECORD.json --episodes EPISODES.jsonl

An arm named by `--host-variant` ran an own task that is the others' task with another host (for
example the static host of a grown shape); only its task name may differ.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from esper.karn.stats import estimate, paired_difference

MUST_AGREE = ("seeds", "task", "max_epochs", "torch", "cpu_capability")


class CollectError(Exception):
    """Arms that cannot be put in one record."""


def read_arm(run_dir: Path, controller: str) -> tuple[dict, dict, list[dict]]:
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    record = json.loads((run_dir / "eval.json").read_text(encoding="utf-8"))
    rows = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [row for row in rows if row["controller"] == controller]
    if sorted(row["seed"] for row in rows) != sorted(record["seeds"]):
        raise CollectError(
            f"collect: {run_dir} holds {len(rows)} {controller!r} episodes for {len(record['seeds'])} seeds"
        )
    return config, record, sorted(rows, key=lambda row: row["seed"])


def paired_of(a: list[dict], b: list[dict], key: str) -> dict[str, object]:
    return paired_difference([r[key] for r in a], [r[key] for r in b]).to_json()


def collect(
    arms: list[list[str]], pairs: list[list[str]], commits: dict[str, str], host_variants: frozenset[str] = frozenset()
) -> tuple[dict, list[dict]]:
    """`host_variants` names arms that ran an own task: the others' task with a host of its own
    (`--task package.module:function`). Their task name may differ; it is kept in their summary."""
    summary: dict[str, dict] = {}
    by_arm: dict[str, list[dict]] = {}
    unknown = host_variants - {name for name, _, _ in arms}
    if unknown:
        raise CollectError(f"collect: --host-variant {sorted(unknown)[0]} names an arm not given")
    if all(name in host_variants for name, _, _ in arms):
        raise CollectError("collect: every arm is a --host-variant; one arm must run the task itself")
    read = {name: read_arm(Path(run_dir), controller) for name, run_dir, controller in arms}
    reference = next(read[name][1] for name, _, _ in arms if name not in host_variants)
    for name, _, controller in arms:
        config, record, rows = read[name]
        for key in MUST_AGREE:
            if key == "task" and name in host_variants:
                continue
            if record.get(key) != reference.get(key):
                raise CollectError(f"collect: {key} of arm {name!r} is {record.get(key)!r}, not {reference.get(key)!r}")
        by_arm[name] = rows
        summary[name] = {
            "controller": controller,
            **({"task": record["task"]} if name in host_variants else {}),
            "command_line": config["command_line"][1:],
            "host_knobs": {k: v for k, v in config["knobs"]["host"].items() if v is not None},
            "commit": commits.get(name),
            "test_accuracy": estimate([r["test_accuracy"] for r in rows]).to_json(),
            "selection_accuracy": estimate([r["val_accuracy"] for r in rows]).to_json(),
            "mean_final_params": round(statistics.fmean(r["host_params"] + r["seed_params"] for r in rows), 1),
            "mean_train_gflops": round(statistics.fmean(r["train_gflops"] for r in rows), 1),
            "mean_fossilized": statistics.fmean(r["fossilized"] for r in rows),
            "mean_culled": statistics.fmean(r["culled"] for r in rows),
        }
    paired = []
    for a, b in pairs:
        if a not in by_arm or b not in by_arm:
            raise CollectError(f"collect: --pair {a} {b} names an arm not given; arms: {' '.join(by_arm)}")
        ra, rb = by_arm[a], by_arm[b]
        paired.append(
            {
                "a": a,
                "b": b,
                "a_minus_b_selection_accuracy": paired_of(ra, rb, "val_accuracy"),
                "a_minus_b_test_accuracy": paired_of(ra, rb, "test_accuracy"),
                "a_ahead_on_test": sum(x["test_accuracy"] > y["test_accuracy"] for x, y in zip(ra, rb, strict=True)),
            }
        )
    record = {key: reference[key] for key in MUST_AGREE} | {"arms": summary, "paired": paired}
    episodes = [{"arm": name, **row} for name, rows in by_arm.items() for row in rows]
    return record, episodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", nargs=3, action="append", required=True, metavar=("NAME", "RUN_DIR", "CONTROLLER"))
    parser.add_argument("--pair", nargs=2, action="append", default=[], metavar=("A", "B"))
    parser.add_argument("--commit", nargs=2, action="append", default=[], metavar=("ARM", "COMMIT"))
    parser.add_argument(
        "--host-variant", action="append", default=[], metavar="ARM", help="an arm that ran the task with its own host"
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--episodes", required=True)
    args = parser.parse_args(argv)
    try:
        record, episodes = collect(args.arm, args.pair, dict(args.commit), frozenset(args.host_variant))
    except (CollectError, FileNotFoundError) as exc:
        print(str(exc).splitlines()[0], file=sys.stderr)
        return 2
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    Path(args.episodes).write_text("".join(json.dumps(row) + "\n" for row in episodes), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
