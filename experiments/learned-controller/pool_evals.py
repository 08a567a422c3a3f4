"""Pool the paired comparison of two controllers over several `esper eval` runs on disjoint seeds.

Each `eval.json` pairs its controllers over its own seeds; ten seeds give a wide interval. Runs
on disjoint seed sets pair the same way, so their seeds can be pooled into one paired estimate.
Pool every set that was run, not the ones that came out well: which sets to pool must not depend
on their results.

    python experiments/learned-controller/pool_evals.py --a policy:shapes --b heuristic FILE [FILE ...]

A controller may go by another name in some files (a checkpoint path before it shipped): give
every name it has (`--a policy:shapes --a policy:/tmp/recipe/v12/checkpoints/round-0008.pt`; the
first is the one reported); each file must hold exactly one of them. Where one name means
different controllers in different files (one checkpoint path reused by two runs), `NAME@FILE`
makes an alias count only in the file whose name is FILE (`--a policy:/tmp/v12/round-0008.pt@eval_a.json`).
Files that record their policies' hashes (`policy_sha256`, of each policy's weights and observation
statistics; evals since 2026-11-25) must agree on them: `policy:shapes` names whatever ships at the
time of the eval.
Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from esper.karn.stats import estimate, paired_difference


def split_alias(name: str) -> tuple[str, str | None]:
    """(NAME, FILE) of `NAME@FILE`; (name, None) for a plain name."""
    alias, at, file = name.rpartition("@")
    return (alias, file) if at and file.endswith(".json") else (name, None)


def names_for(names: list[str], path: str) -> list[str]:
    """The names that count in the file at `path`: every plain name, and each `NAME@FILE` whose
    FILE is that file's path as given, or its name."""
    usable = []
    for name in names:
        alias, file = split_alias(name)
        if file is None or file in (path, Path(path).name):
            usable.append(alias)
    return usable


def controller_in(run: dict, names: list[str], path: str) -> tuple[dict, str | None]:
    """The controller's per-seed lists in one file, and its policy's `policy_sha256` where the
    file records it (evals since 2026-11-25; None otherwise)."""
    names = names_for(names, path)
    found = [name for name in names if name in run["controllers"]]
    if len(found) != 1:
        held = " ".join(run["controllers"])
        raise SystemExit(f"pool_evals: {path} holds {len(found)} of {' '.join(names)} (it holds: {held})")
    return run["controllers"][found[0]], run.get("policy_sha256", {}).get(found[0])


def check_one_policy(hashes: dict[str, str], names: list[str]) -> None:
    """A name can mean two policies (`policy:shapes` is whatever ships at the time): refuse to pool
    files whose recorded policy files differ."""
    if len(set(hashes.values())) > 1:
        listed = ", ".join(f"{path}: {digest[:12]}" for path, digest in hashes.items())
        raise SystemExit(f"pool_evals: {' '.join(names)} is not one policy across these files ({listed})")


def pool(paths: list[str], a_names: list[str], b_names: list[str]) -> dict:
    seeds: list[int] = []
    a_acc: list[float] = []
    b_acc: list[float] = []
    a_params: list[float] = []
    b_params: list[float] = []
    per_file = []
    a_hashes: dict[str, str] = {}
    b_hashes: dict[str, str] = {}
    for path in paths:
        run = json.loads(Path(path).read_text(encoding="utf-8"))
        overlap = sorted(set(seeds) & set(run["seeds"]))
        if overlap:
            raise SystemExit(f"pool_evals: {path} repeats seeds {overlap}; pool disjoint seed sets only")
        (a, a_hash), (b, b_hash) = controller_in(run, a_names, path), controller_in(run, b_names, path)
        for hashes, digest in ((a_hashes, a_hash), (b_hashes, b_hash)):
            if digest is not None:
                hashes[path] = digest
        seeds += run["seeds"]
        a_acc += a["test_accuracy"]
        b_acc += b["test_accuracy"]
        a_params += a["seed_params"]
        b_params += b["seed_params"]
        diff = paired_difference(a["test_accuracy"], b["test_accuracy"])
        per_file.append({"file": path, "seeds": [run["seeds"][0], run["seeds"][-1]], "a_minus_b": diff.to_json()})
    check_one_policy(a_hashes, a_names)
    check_one_policy(b_hashes, b_names)
    return {
        "a": split_alias(a_names[0])[0],
        "b": split_alias(b_names[0])[0],
        "n_seeds": len(seeds),
        "a_minus_b_test_accuracy": paired_difference(a_acc, b_acc).to_json(),
        "a_ahead_on": sum(x > y for x, y in zip(a_acc, b_acc, strict=True)),
        "a_test_accuracy": estimate(a_acc).to_json(),
        "b_test_accuracy": estimate(b_acc).to_json(),
        "a_mean_added_params": round(sum(a_params) / len(a_params), 1),
        "b_mean_added_params": round(sum(b_params) / len(b_params), 1),
        "per_file": per_file,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", help="eval.json files on disjoint seed sets")
    parser.add_argument("--a", action="append", required=True, help="the controller's name; repeat for aliases")
    parser.add_argument("--b", action="append", required=True, help="the baseline's name; repeat for aliases")
    args = parser.parse_args(argv)
    print(json.dumps(pool(args.files, args.a, args.b), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
