"""How much of a probationary seed's measured contribution is the seed, and how much the sample.

Why: the gates, every controller and the keep/cull AUC read a seed's counterfactual contribution
on the selection split, 2,000 images on `shapes`, where one image is 0.05 points. A probationary
seed's first reading is typically a few tenths of a point either side of zero: a handful of
images. Whether its sign says anything about the seed is a question of measurement, and this
script answers it by measuring twice.

It replays `esper eval` episodes of the given controllers (the same settings, seeds, and so the
same decisions) and, at every decision where a seed is on probation, measures that seed's
contribution again on a *retest sample*: `--retest-images` fresh images from the task's own
generator, a stream that none of the task's splits draws from (`RETEST_STREAM`), normalised with
the training split's statistics as the splits are, with the same BatchNorm recalibration and the
same fused measurement (`esper.tolaria.training.validate`). No decision reads it, so the episode
goes on exactly as in `eval` (the final test accuracies can be checked against an `eval.json`
with `--check-against`). With 20,000 images the retest reading is a tenfold sample; where it and
the selection reading disagree in sign, the selection reading's sign was the sample's.

    python experiments/keep-cull-reading/counterfactual_retest.py --controllers policy:shapes heuristic \
        --seeds 150:160 [--retest-images 20000] [--workers 2] [--keep-reading accuracy|loss]
        [--check-against eval.json] [--out FILE]
    python experiments/keep-cull-reading/counterfactual_retest.py --pool FILE [FILE ...] [--out FILE]

Prints JSON (and writes it to `--out`): every probationary reading (controller, seed, epoch,
slot, epochs on probation, the accuracy reading on the selection and retest samples and the
loss reading on both, a policy's keep score; `keep_reading` says which reading the episodes'
decisions read, by default the loss since 2026-11-27), and
per controller, for the first readings and for all: how often the two signs agree, the
correlation, the spread of the selection reading around the retest one, and of the readings at or
below zero on the selection split how many the retest sample puts above zero; for a policy, its
keep/cull AUC with each decision labelled by the selection reading's sign (what `eval` reports)
and by the retest reading's.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import json
import math
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from esper.kasmina import StageChange
from esper.leyline import Decision, TrainingSignals
from esper.runs.common import UsageError, torch_build
from esper.runs.config import python_request
from esper.runs.eval_run import (
    EVAL_DEFAULTS,
    EVAL_GROUPS,
    EpisodeJob,
    EvalRun,
    build_controller,
    episode_env,
    episode_jobs,
    ignore_interrupts,
    resolve_eval,
)
from esper.simic.controller import PolicyController
from esper.tamiyo.diagnostics import KeepCullCounts, scored_slots
from esper.tolaria.datasets import Batch, ImageData, normalize_channels, procedural_shapes, shapes_streams
from esper.tolaria.environment import MorphogeneticEnv
from esper.tolaria.episode import Controller, run_episode
from esper.tolaria.passes import VALIDATION_BATCH_SIZE
from esper.tolaria.tasks import SHAPES_DATA_SEED

RETEST_STREAM = 1_000_003
"""The generator seed of the retest images: `load_shapes` draws the task's three splits from
`shapes_streams` of its data seed (0, 1 and 2 here), and no task uses this one."""


@functools.lru_cache(maxsize=1)
def standardised_retest_images(
    n_train: int, image_size: int, n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The training pool and `n` fresh images, both standardised with the pool's channel
    statistics as `load_shapes` standardises its splits (one draw per worker process)."""
    train_stream, *_ = shapes_streams(SHAPES_DATA_SEED)
    train_x, _ = procedural_shapes(n_train, seed=train_stream, image_size=image_size)
    x, y = procedural_shapes(n, seed=RETEST_STREAM, image_size=image_size)
    train_x, x = normalize_channels(train_x, x)
    return train_x, x, y


def retest_images(data: ImageData, n: int) -> list[Batch]:
    """`n` fresh `shapes` images in the batches a measurement reads, on the data's device; the
    pool drawn to standardise them is checked to be the task's."""
    train_x, x, y = standardised_retest_images(data.train_x.shape[0], data.val_x.shape[-1], n)
    if not torch.equal(train_x, data.train_x.cpu()):
        raise SystemExit("counterfactual_retest: the task's training pool is not shapes data seed 0's")
    device, step = data.val_x.device, VALIDATION_BATCH_SIZE
    return [(x[i : i + step].to(device), y[i : i + step].to(device)) for i in range(0, n, step)]


class Retesting:
    """Wraps a controller: before each decision, every probationary seed the decision will see
    (the seeds a keep/cull decision is scored on) is measured again on the retest images. It reads
    the model and writes nothing the episode uses."""

    def __init__(self, inner: Controller, env: MorphogeneticEnv, batches: list[Batch]) -> None:
        self.inner, self.env, self.batches = inner, env, batches
        self.readings: list[dict[str, Any]] = []

    def reset(self) -> None:
        self.inner.reset()

    def decide(self, signals: TrainingSignals) -> Decision:
        scored = [s for _, s in scored_slots(signals)]
        if scored:
            assert self.env.model is not None
            names = tuple(s.name for s in scored)
            retest = self.env.passes.measure_on(self.env.model, self.batches, names)
            for s in scored:
                self.readings.append(
                    {
                        "epoch": signals.epoch,
                        "slot": s.name,
                        "epochs_on_probation": s.epochs_in_stage,
                        # the accuracy reading on both samples, whichever reading the gates decide on
                        "selection": s.accuracy_contribution,
                        "retest": retest.accuracy_contribution(s.name),
                        "selection_loss": s.loss_contribution,
                        "retest_loss": retest.loss_contribution(s.name),
                    }
                )
        return self.inner.decide(signals)

    def record_step(self, decision: Decision, changes: Sequence[tuple[str, StageChange]]) -> None:
        self.inner.record_step(decision, changes)


def replay(job: EpisodeJob, n_images: int) -> dict[str, Any]:
    """One `eval` episode (as `esper.runs.eval_run.run_one` runs it, one thread) with every
    probationary decision's seed measured on the retest images too."""
    torch.set_num_threads(1)
    env = episode_env(job)
    inner = build_controller(job, env.config)
    controller = Retesting(inner, env, retest_images(env.passes.data, n_images))  # type: ignore[arg-type]
    outcome = run_episode(env, controller, rng_seed=job.rng_seed, episode=job.rng_seed)
    if isinstance(inner, PolicyController):
        keep = {(d["epoch"], d["slot"]): d["keep_score"] for d in inner.diagnostics.keep_cull_decisions}
        for r in controller.readings:
            r["keep_score"] = keep[(r["epoch"], r["slot"])]
    for r in controller.readings:
        r.update(controller=job.spec.name, seed=job.rng_seed)
    return {
        "controller": job.spec.name,
        "seed": job.rng_seed,
        "test_accuracy": outcome.final_test_accuracy,
        "selection_images": env.passes.data.split_sizes()["val"],
        "readings": controller.readings,
    }


def first_readings(readings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each seed's first probationary reading (one epoch on probation is its second)."""
    return [r for r in readings if r["epochs_on_probation"] == 0]


def agreement(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """How far the selection reading is the retest reading, over `readings`."""
    if not readings:
        return {"n": 0}
    sel = [r["selection"] for r in readings]
    ret = [r["retest"] for r in readings]
    gaps = [a - b for a, b in zip(sel, ret, strict=True)]
    at_or_below = [r for r in readings if r["selection"] <= 0]
    above = [r for r in readings if r["selection"] > 0]
    out: dict[str, Any] = {
        "n": len(readings),
        "sign_agreement": round(sum((a > 0) == (b > 0) for a, b in zip(sel, ret, strict=True)) / len(sel), 4),
        "correlation": round(statistics.correlation(sel, ret), 4) if min(len(set(sel)), len(set(ret))) > 1 else None,
        "selection_mean": round(statistics.fmean(sel), 4),
        "retest_mean": round(statistics.fmean(ret), 4),
        "selection_minus_retest_sd": round(statistics.stdev(gaps), 4) if len(gaps) > 1 else None,
        "selection_at_or_below_0": len(at_or_below),
        "of_those_retest_above_0": sum(r["retest"] > 0 for r in at_or_below),
        "selection_above_0": len(above),
        "of_those_retest_at_or_below_0": sum(r["retest"] <= 0 for r in above),
        "retest_at_or_below_0": sum(r["retest"] <= 0 for r in readings),
    }
    return out


DEAD_ZONE = 0.3
"""Points: a retest reading this close to zero labels no keep/cull decision (too close to call)."""


def keep_cull_auc(readings: list[dict[str, Any]], label: str, dead_zone: float = 0.0) -> dict[str, float | int | None]:
    """A policy's keep/cull AUC (`esper.tamiyo.diagnostics`) over `readings`, each labelled by the
    sign of its `label` reading ("selection": as `eval` reports it; "retest"), leaving out the
    readings within `dead_zone` points of zero."""
    counts = KeepCullCounts()
    for r in readings:
        if abs(r[label]) >= dead_zone:
            counts.add(r["keep_score"], r[label] > 0)
    return counts.to_json()


def loss_reading(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """The loss contribution as a reading beside accuracy, on the readings that carry it. Put in
    points by the slope of the retest accuracy reading on the retest loss reading (least squares
    through zero), its spread around the retest is comparable with the accuracy reading's
    (`selection_minus_retest_sd`); and how well each selection reading predicts the retest
    accuracy reading (the seed's contribution on ten times the images) is a correlation."""
    rows = [r for r in readings if r.get("selection_loss") is not None and r.get("retest_loss") is not None]
    if len(rows) < 3:
        return {"n": len(rows)}
    acc = [r["retest"] for r in rows]
    sel_loss, ret_loss = [r["selection_loss"] for r in rows], [r["retest_loss"] for r in rows]
    slope = sum(a * b for a, b in zip(acc, ret_loss, strict=True)) / sum(b * b for b in ret_loss)
    gaps = [slope * (a - b) for a, b in zip(sel_loss, ret_loss, strict=True)]
    return {
        "n": len(rows),
        "points_per_nat": round(slope, 3),
        "selection_minus_retest_sd_points": round(statistics.stdev(gaps), 4),
        "accuracy_selection_minus_retest_sd_points": round(
            statistics.stdev([r["selection"] - r["retest"] for r in rows]), 4
        ),
        "correlation_with_retest_accuracy": round(statistics.correlation(sel_loss, acc), 4),
        "accuracy_reading_correlation_with_retest_accuracy": round(
            statistics.correlation([r["selection"] for r in rows], acc), 4
        ),
    }


class BadInput(ValueError):
    """A bad flag or file: one line on stderr, exit code 2, nothing written."""


def summarise(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """Per controller: `agreement` over the first readings and over all; for a policy (its
    readings carry keep scores) the keep/cull AUC labelled by each reading's sign."""
    by_controller: dict[str, list[dict[str, Any]]] = {}
    for r in readings:
        by_controller.setdefault(r["controller"], []).append(r)
    out = {}
    for name, rows in by_controller.items():
        out[name] = {
            "first_readings": agreement(first_readings(rows)),
            "all_readings": agreement(rows),
            "loss_reading_first": loss_reading(first_readings(rows)),
            "loss_reading_all": loss_reading(rows),
        }
        if all("keep_score" in r for r in rows):
            out[name]["keep_cull_by_selection_sign"] = keep_cull_auc(rows, "selection")
            out[name]["keep_cull_by_retest_sign"] = keep_cull_auc(rows, "retest")
            out[name]["keep_cull_by_retest_sign_dead_zone"] = keep_cull_auc(rows, "retest", DEAD_ZONE)
    return out


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"{what} {path}: {exc}") from None


def eval_accuracies(path: Path, run: EvalRun, names: Sequence[str]) -> dict[tuple[str, int], float]:
    """The test accuracy of each (controller, seed) of this run that `path`'s eval.json holds:
    what `--check-against` compares the replayed episodes with. Read before the run, so a file
    that holds none of them is refused before an hour is spent."""
    report = read_json(path, "--check-against")
    try:
        index = {int(seed): k for k, seed in enumerate(report["seeds"])}
        held = {
            (name, seed): float(report["controllers"][name]["test_accuracy"][index[seed]])
            for name in names
            if name in report["controllers"]
            for seed in run.seeds
            if seed in index
        }
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise BadInput(f"--check-against {path}: not an eval.json ({exc!r})") from None
    if not held:
        raise BadInput(f"--check-against {path}: holds none of these controllers' episodes on seeds {run.seeds}")
    return held


def check_against(episodes: list[dict[str, Any]], held: dict[tuple[str, int], float]) -> dict[str, Any]:
    """How many replayed episodes an eval.json holds, and which of them ended with another test
    accuracy (none: the retest measurements changed nothing, and the machines drew alike)."""
    compared = [e for e in episodes if (e["controller"], e["seed"]) in held]
    differ = [
        f"{e['controller']} seed {e['seed']}"
        for e in compared
        if not math.isclose(held[(e["controller"], e["seed"])], e["test_accuracy"], abs_tol=1e-9)
    ]
    return {"compared": len(compared), "differ": differ}


def eval_run(
    controllers: Sequence[str], seeds: str, max_epochs: int | None, keep_reading: str | None = None
) -> EvalRun:
    """The settings `esper eval --task shapes` resolves for these controllers and seeds (and
    `--gates.keep_reading` when given), without a learning-rate warm-up: the recipe of this
    experiment's records (shapes has warmed up for 3 of its 40 epochs by default since 2026-11-28)."""
    settings = {"task": "shapes", "controllers": list(controllers), "seeds": seeds, "max_epochs": max_epochs}
    knobs: dict = {"host": {"lr_warmup_epochs": 0}}
    if keep_reading is not None:
        knobs["gates"] = {"keep_reading": keep_reading}
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = str(Path(scratch) / "run")
        request = python_request(
            "eval", EVAL_DEFAULTS, EVAL_GROUPS, settings, knobs, run_dir=run_dir, resume=None, quiet=False
        )
        try:
            return resolve_eval(request)
        except UsageError as error:
            raise BadInput(str(error)) from None


def check_out(out: Path | None) -> None:
    """`--out` must be writable before the run, not after it."""
    if out is not None and (out.is_dir() or not out.parent.is_dir()):
        raise BadInput(f"--out {out}: not a file in an existing folder")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    if args.retest_images < VALIDATION_BATCH_SIZE:
        raise BadInput(f"--retest-images {args.retest_images}: at least {VALIDATION_BATCH_SIZE}")
    if args.workers < 1:
        raise BadInput(f"--workers {args.workers}: at least 1")
    run = eval_run(args.controllers, args.seeds, args.max_epochs, args.keep_reading)
    growing = [s for s in run.controllers if s.grows]
    if not growing:
        raise BadInput(f"--controllers {' '.join(args.controllers)}: none of them grows seeds")
    names = [s.name for s in growing]
    held = None if args.check_against is None else eval_accuracies(args.check_against, run, names)
    started = time.time()
    episodes = []
    context = multiprocessing.get_context("spawn")  # as `esper eval` runs its episodes
    with concurrent.futures.ProcessPoolExecutor(
        args.workers, mp_context=context, initializer=ignore_interrupts
    ) as pool:
        futures = [pool.submit(replay, job, args.retest_images) for job in episode_jobs(run, growing, {})]
        for future in concurrent.futures.as_completed(futures):
            e = future.result()
            episodes.append(e)
            print(f"  {e['controller']} seed {e['seed']}: {len(e['readings'])} probationary readings", file=sys.stderr)
    episodes.sort(key=lambda e: (names.index(e["controller"]), e["seed"]))
    result: dict[str, Any] = {
        "command": "python experiments/keep-cull-reading/counterfactual_retest.py " + " ".join(args.argv),
        "seeds": list(run.seeds),
        "selection_images": episodes[0]["selection_images"],
        "retest_images": args.retest_images,
        "keep_reading": run.env.thresholds.keep_reading,  # what the episodes' decisions read
        "minutes": round((time.time() - started) / 60, 1),
        **torch_build(),
        "summary": summarise([r for e in episodes for r in e["readings"]]),
        "test_accuracy": {f"{e['controller']} {e['seed']}": e["test_accuracy"] for e in episodes},
        "readings": [r for e in episodes for r in e["readings"]],
    }
    if held is not None:
        result["check_against_eval"] = check_against(episodes, held)
    return result


SAME_IN_POOLED_RUNS = ("selection_images", "retest_images")
"""What must match for two runs' readings to mean the same thing."""


def pooled(paths: Sequence[Path]) -> dict[str, Any]:
    """The summary of several runs' readings together. Their seeds must be disjoint (a seed in
    two files would count its readings twice) and their samples the same sizes; the torch
    builds they ran on are listed, one per file (a file from before they were recorded: None)."""
    runs = [read_json(path, "--pool") for path in paths]
    try:
        seeds = [int(seed) for run in runs for seed in run["seeds"]]
        readings = [r for run in runs for r in run["readings"]]
        sizes = {key: {run[key] for run in runs} for key in SAME_IN_POOLED_RUNS}
    except (KeyError, TypeError) as exc:
        raise BadInput(f"--pool: not a counterfactual_retest result ({exc!r})") from None
    shared = sorted({s for s in seeds if seeds.count(s) > 1})
    if shared:
        raise BadInput(f"--pool: the files share seeds {shared}; pool runs on disjoint seeds")
    for key, values in sizes.items():
        if len(values) > 1:
            raise BadInput(f"--pool: the files differ in {key} ({sorted(values)}); their readings are not alike")
    return {
        "pooled": [str(p) for p in paths],
        "seeds": sorted(seeds),
        **{key: values.pop() for key, values in sizes.items()},
        "builds": [{key: run.get(key) for key in ("torch", "cpu_capability")} for run in runs],
        "summary": summarise(readings),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--controllers", nargs="+", default=["policy:shapes", "heuristic"])
    parser.add_argument("--seeds", default="150:160", help="A:B, as in `esper eval`")
    parser.add_argument("--max-epochs", type=int, help="host epochs per episode (default: the task's)")
    parser.add_argument("--retest-images", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--check-against", type=Path, help="an eval.json of the same controllers and seeds")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--keep-reading",
        help="the reading the episodes' gates and controllers decide on, as --gates.keep_reading "
        "(default: Esper's, the loss reading; the records before 2026-11-27 ran with accuracy)",
    )
    help_pool = "summarise these files' readings together; measure nothing"
    parser.add_argument("--pool", type=Path, nargs="+", help=help_pool)
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    try:
        check_out(args.out)
        result = pooled(args.pool) if args.pool else measure(args)
    except BadInput as error:
        print(f"counterfactual_retest: error: {error}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
