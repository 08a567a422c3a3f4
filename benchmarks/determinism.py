"""Does a run repeat on this device, and what do deterministic kernels cost? Ratios from one run.

repeats_deterministic: two `esper heuristic` runs of one seed with `--deterministic` end with
    bit-identical weights (and two `esper ppo` rounds with bit-identical policies).
repeats_default: the same for two runs without it (on CUDA cuDNN's backward convolutions
    usually make them differ; on the CPU they repeat either way).
deterministic_over_default: seconds of the second deterministic heuristic run / the second
    default one (the first of each pays for warm-up).

Every run is one process's, one after the other, on the device given.

Usage: python benchmarks/determinism.py --device cuda [--epochs 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import esper.runs
from esper.runs.common import torch_build


def weights_digest(state: dict[str, Any]) -> str:
    """A hash of every tensor's bytes, in key order (paths and times are left out)."""
    h = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        if isinstance(value, torch.Tensor):
            h.update(key.encode())
            h.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def heuristic_run(root: Path, name: str, device: str, epochs: int, deterministic: bool) -> dict[str, Any]:
    run_dir = root / name
    start = time.perf_counter()
    summary = esper.runs.heuristic(
        device=device,
        deterministic=deterministic or None,
        max_epochs=epochs,
        seed=3,
        run_dir=run_dir,
        quiet=True,
        knobs={"heuristic": {"warmup_epochs": 2}},  # a short warm-up: it grows within --epochs
    )
    seconds = time.perf_counter() - start
    grown = torch.load(run_dir / "grown" / "episode-0000.pt", weights_only=False)["state_dict"]
    return {
        "seconds": round(seconds, 2),
        "test_accuracy": summary["final_test_accuracy"],
        "weights": weights_digest(grown),
    }


def ppo_run(root: Path, name: str, device: str, deterministic: bool) -> dict[str, Any]:
    settings = {"episodes": 2, "n_envs": 2, "max_epochs": 3, "device": device, "deterministic": deterministic or None}
    summary = esper.runs.ppo(run_dir=root / name, quiet=True, **settings)
    checkpoint = torch.load(summary["checkpoint"], weights_only=False)
    return {"policy": weights_digest(checkpoint["learner"]["policy"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=10, help="host epochs of each heuristic run (default 10)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON only
        root = Path(tmp)
        for deterministic in (False, True):  # default first: the deterministic flags stay on once set
            tag = "deterministic" if deterministic else "default"
            for rep in range(2):
                runs[f"heuristic_{tag}_{rep}"] = heuristic_run(
                    root, f"h_{tag}_{rep}", args.device, args.epochs, deterministic
                )
                runs[f"ppo_{tag}_{rep}"] = ppo_run(root, f"ppo_{tag}_{rep}", args.device, deterministic)

    def repeats(tag: str) -> bool:
        same_grown = runs[f"heuristic_{tag}_0"]["weights"] == runs[f"heuristic_{tag}_1"]["weights"]
        return same_grown and runs[f"ppo_{tag}_0"]["policy"] == runs[f"ppo_{tag}_1"]["policy"]

    report = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "device": args.device,
        "device_name": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "epochs": args.epochs,
        "repeats_deterministic": repeats("deterministic"),
        "repeats_default": repeats("default"),
        "deterministic_over_default": round(
            runs["heuristic_deterministic_1"]["seconds"] / runs["heuristic_default_1"]["seconds"], 3
        ),
        "runs": runs,
        **torch_build(),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
