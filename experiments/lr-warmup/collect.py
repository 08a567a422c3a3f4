"""Gather the `esper eval` runs of one training-recipe comparison into one record.

Each arm is one eval run directory (its `config.json`, `eval.json` and `episodes.jsonl`) of a
single controller on the same seeds; arms may differ in their host knobs (`--host.host_lr`,
`--host.lr_warmup_epochs`, `--host.width`), which a pairing across evals by `pair_evals.py`
would not show. The record keeps every arm's command line, its knobs, its episodes and each
requested pair's paired difference on the selection and the test split. Runs of different seeds,
tasks, episode lengths, torch builds, CPU kernels or (where both arms record one) CPUs are
refused (one line, exit code 2).

    python experiments/lr-warmup/collect.py --arm NAME RUN_DIR CONTROLLER [--arm ...] \
        --pair A B [--pair ...] --commit NAME COMMIT [...] [--host-variant NAME ...] \
        [--seeds A:B] --out RECORD.json --episodes EPISODES.jsonl

An arm named by `--host-variant` ran an own task that is the others' task with another host (for
example the static host of a grown shape); only its task name may differ.

An arm's RUN_DIR may instead be a committed record, so that episodes whose run directory is gone
pair with new ones: an eval's record `X.json` (its `eval.json`, with `X_config.json` and
`X_episodes.jsonl` beside it; CONTROLLER as the eval named it), or a record this script wrote
(CONTROLLER: the arm's name in it; its command line and commit come along). `--seeds A:B` takes
every arm's episodes of those seeds only, refusing an arm that lacks one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from esper.karn.stats import estimate, paired_difference

MUST_AGREE = ("seeds", "task", "max_epochs", "torch", "cpu_capability")
CPU = "cpu"
"""The CPU's model and kernel-choosing extensions (records since 2026-11-28): two arms that both
name one must name the same, since two "AVX512" machines rounded one held episode apart. An arm
recorded before the field existed is let through; each arm's summary says which CPU it ran on."""


class CollectError(Exception):
    """Arms that cannot be put in one record."""


def read_arm(source: Path, controller: str, seeds: tuple[int, ...] | None = None) -> tuple[dict, dict, list[dict]]:
    """One arm's record fields (those of `MUST_AGREE`), its provenance (`controller`,
    `command_line`, `host_knobs` and, from a record this script wrote, `commit`) and its episodes
    in seed order: from an eval run directory or a committed record (the module docstring)."""
    if source.is_dir():
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
        record = json.loads((source / "eval.json").read_text(encoding="utf-8"))
        rows = read_rows(source / "episodes.jsonl", "controller", controller)
        provenance = eval_provenance(config, controller)
    else:
        record = json.loads(source.read_text(encoding="utf-8"))
        stem = source.with_suffix("")
        rows_path = stem.with_name(stem.name + "_episodes.jsonl")
        if "arms" in record:  # a record of this script: the arm's summary carries its provenance
            if controller not in record["arms"]:
                raise CollectError(f"collect: {source} has no arm {controller!r}; arms: {' '.join(record['arms'])}")
            arm = record["arms"][controller]
            rows = read_rows(rows_path, "arm", controller)
            keys = ("controller", "command_line", "host_knobs", "commit")
            provenance = {key: arm[key] for key in keys} | {"source": str(source)}
        else:
            config = json.loads(stem.with_name(stem.name + "_config.json").read_text(encoding="utf-8"))
            rows = read_rows(rows_path, "controller", controller)
            provenance = eval_provenance(config, controller) | {"source": str(source)}
    wanted = tuple(record["seeds"]) if seeds is None else seeds
    by_seed = {row["seed"]: row for row in rows}
    if len(by_seed) != len(rows) or not set(wanted) <= set(by_seed) or (seeds is None and len(rows) != len(wanted)):
        raise CollectError(f"collect: {source} holds {len(rows)} {controller!r} episodes for {len(wanted)} seeds")
    return {**record, "seeds": sorted(wanted)}, provenance, [by_seed[seed] for seed in sorted(wanted)]


def without_arm(row: dict) -> dict:
    return {key: value for key, value in row.items() if key != "arm"}


def read_rows(path: Path, key: str, value: str) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [row for row in rows if row.get(key) == value]


def eval_provenance(config: dict, controller: str) -> dict:
    return {
        "controller": controller,
        "command_line": config["command_line"][1:],
        "host_knobs": {k: v for k, v in config["knobs"]["host"].items() if v is not None},
    }


def paired_of(a: list[dict], b: list[dict], key: str) -> dict[str, object]:
    return paired_difference([r[key] for r in a], [r[key] for r in b]).to_json()


def collect(
    arms: list[list[str]],
    pairs: list[list[str]],
    commits: dict[str, str],
    host_variants: frozenset[str] = frozenset(),
    seeds: tuple[int, ...] | None = None,
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
    read = {name: read_arm(Path(run_dir), controller, seeds) for name, run_dir, controller in arms}
    recorded = {name: read[name][0][CPU] for name, _, _ in arms if read[name][0].get(CPU) is not None}
    if len(set(recorded.values())) > 1:
        (first, cpu), *rest = recorded.items()
        other, other_cpu = next((n, c) for n, c in rest if c != cpu)
        raise CollectError(f"collect: {CPU} of arm {other!r} is {other_cpu!r}, not {cpu!r} (arm {first!r})")
    reference = next(read[name][0] for name, _, _ in arms if name not in host_variants)
    for name, _, _ in arms:
        record, provenance, rows = read[name]
        for key in MUST_AGREE:
            if key == "task" and name in host_variants:
                continue
            if record.get(key) != reference.get(key):
                raise CollectError(f"collect: {key} of arm {name!r} is {record.get(key)!r}, not {reference.get(key)!r}")
        by_arm[name] = rows
        summary[name] = {
            **provenance,
            **({"task": record["task"]} if name in host_variants else {}),
            "commit": commits.get(name, provenance.get("commit")),
            CPU: record.get(CPU),
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
    cpus = {arm[CPU] for arm in summary.values()} - {None}
    record = {key: reference[key] for key in MUST_AGREE} | {CPU: cpus.pop() if len(cpus) == 1 else None}
    record |= {"arms": summary, "paired": paired}
    # an arm held in a record of this script brings its old arm name: the new one replaces it
    episodes = [{"arm": name, **without_arm(row)} for name, rows in by_arm.items() for row in rows]
    return record, episodes


def parse_seed_range(text: str) -> tuple[int, ...]:
    try:
        first, end = (int(part) for part in text.split(":"))
    except ValueError:
        raise CollectError(f"collect: --seeds {text!r}: give A:B, the seeds A to B-1") from None
    if end <= first:
        raise CollectError(f"collect: --seeds {text!r}: B must be above A")
    return tuple(range(first, end))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", nargs=3, action="append", required=True, metavar=("NAME", "RUN_DIR", "CONTROLLER"))
    parser.add_argument("--pair", nargs=2, action="append", default=[], metavar=("A", "B"))
    parser.add_argument("--commit", nargs=2, action="append", default=[], metavar=("ARM", "COMMIT"))
    parser.add_argument(
        "--host-variant", action="append", default=[], metavar="ARM", help="an arm that ran the task with its own host"
    )
    parser.add_argument("--seeds", help="A:B: every arm's episodes of seeds A to B-1 only")
    parser.add_argument("--out", required=True)
    parser.add_argument("--episodes", required=True)
    args = parser.parse_args(argv)
    try:
        seeds = parse_seed_range(args.seeds) if args.seeds else None
        record, episodes = collect(args.arm, args.pair, dict(args.commit), frozenset(args.host_variant), seeds)
    except (CollectError, FileNotFoundError) as exc:
        print(str(exc).splitlines()[0], file=sys.stderr)
        return 2
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    Path(args.episodes).write_text("".join(json.dumps(row) + "\n" for row in episodes), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
