"""Ship a trained policy with the package: `policy:NAME` in `esper eval` and `esper grow`.

    python tools/ship_policy.py CHECKPOINT --name shapes --command "esper ppo ..." \
        [--eval experiments/EXPERIMENT/results/eval_....json] [--note TEXT] [--out-dir DIR]

writes `src/esper/tamiyo/trained/NAME.pt` (the checkpoint cut down to what acting reads: no
optimizer or RNG state, loadable with `weights_only=True`) and `NAME.json` beside it: the
training command, the RNG seeds it trained on (which `eval` refuses), the source checkpoint, the
date and machine, and the eval that measured it. Prints the record as JSON.

`--out-dir` writes the same pair elsewhere, for a candidate that is recorded but not shipped
(an experiment's `results/policies/`); `eval` plays it as `policy:DIR/NAME.pt`. There an
existing pair is never replaced: a record that names a file must keep meaning that file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

from esper.karn import write_json_atomic, write_torch_atomic
from esper.runs.common import torch_build
from esper.simic import PolicyController
from esper.simic.checkpoint import CheckpointError, policy_only, read_checkpoint
from esper.tamiyo.trained import TRAINED_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="an `esper ppo` checkpoint")
    parser.add_argument("--name", required=True, help="the name it ships under (policy:NAME)")
    parser.add_argument("--command", required=True, help="the exact command that trained it")
    parser.add_argument("--eval", type=Path, help="the eval.json (or results file) that measured it")
    parser.add_argument("--note", help="how the file came from the command where that is not plain (stages, machines)")
    parser.add_argument(
        "--out-dir", type=Path, default=TRAINED_DIR, help="where NAME.pt and NAME.json go (default: shipped)"
    )
    args = parser.parse_args(argv)
    if not args.name.isidentifier():
        parser.error(f"--name {args.name!r}: use letters, digits and underscores")
    target, record_path = args.out_dir / f"{args.name}.pt", args.out_dir / f"{args.name}.json"
    if args.out_dir.resolve() != TRAINED_DIR.resolve():
        taken = [str(p) for p in (target, record_path) if p.exists()]
        if taken:
            parser.error(f"--name {args.name!r}: {' and '.join(taken)} exist; choose another name")
    try:
        payload = read_checkpoint(args.checkpoint)
    except CheckpointError as exc:
        print(f"ship_policy: error: {exc}", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_torch_atomic(target, policy_only(payload))
    PolicyController.from_checkpoint(target)  # it loads as a controller
    seeds = [int(s) for s in payload["training_seeds"]]
    record = {
        "name": args.name,
        "task": payload["settings"]["task"],
        "command": args.command,
        "training_seeds": f"{min(seeds)}..{max(seeds)}" if seeds == list(range(min(seeds), max(seeds) + 1)) else seeds,
        "source_checkpoint": str(args.checkpoint),
        "episodes_done": int(payload["learner"]["episodes_done"]),
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()} CPU",
        **torch_build(),
        "eval": str(args.eval) if args.eval else None,
        "note": args.note,
        "bytes": target.stat().st_size,
    }
    write_json_atomic(record_path, record)
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
