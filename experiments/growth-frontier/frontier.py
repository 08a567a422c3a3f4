"""The static frontier: does growth beat simply starting bigger?

Static hosts over a width sweep trace the front of what a fixed network reaches for its size and
for its training compute. Growing arms start from a host on (or below) that front:

- `heuristic`: the heuristic with the residual blueprints; on `shapes` with the knobs of the
  residual search (`heuristic_shapes_residual.toml`, the tuned default until 2026-11-27),
  elsewhere with the task's tuned (or built-in) knobs;
- `heuristic+width`: the same knobs with the width blueprints first in its rotation
  (`widen_25`, `widen_50`), then the residual ones;
- `naive`: naive growth, `widen_25` germinated once in every slot from epoch 5, kept wherever
  the gates pass it (no controller); `naive:BLUEPRINT@EPOCH` names another blueprint or epoch;
- `policy:shapes`: the shipped learned controller (on `shapes`);
- `heuristic:FILE`: the heuristic with a knobs file's `[heuristic]` table over the task's tuned
  knobs, as `esper eval --controllers heuristic:FILE` runs it (not a default arm).

Every arm trains by one recipe (`--recipe`): `default`, the task's learning-rate warm-up and
Esper's gates as `esper eval` runs them today (written to `<task>/default_recipe`); or
`2026-11-27`, the recipe of the first frontier (no warm-up, the accuracy reading of a seed's
contribution; written to `<task>`). On `shapes` the `default` recipe adds C_J (`PINNED_ARM`), the
grower that met the growth bar against the static host of its own size, and from half width C_M
(`HALF_WIDTH_ARM`), the literature's regime: width 4 doubled to width 8 on at most 0.85 of its
training FLOPs. An arm may carry gate thresholds after a `~`
(`naive~min_training_epochs=1,blend_epochs=1`, `heuristic~keep_reading=loss`): its episodes run
under those over the recipe's.

Each growing arm runs from every start width given (`--start-widths`; by default the task's
width and, on `shapes`, half of it). Every episode of a seed sees the same data order. Each arm's
point is its mean test accuracy against its mean final parameters and mean training GFLOPs;
the front interpolates the static means piecewise-linearly in log size (or log GFLOPs). A grown
point above the front is growth that pays. Each growing arm is also paired, seed by seed, with
the static width of the sweep nearest its final size and the one nearest its training GFLOPs.

Episodes run in worker processes of one thread each, through `esper eval`'s own episode path,
and each is appended to `<out-dir>/episodes.jsonl` as it ends: run the same command again to
continue a stopped frontier, or with more seeds to extend it (the episodes held are reused). A
heuristic arm's episodes record its knobs and a policy arm's the hash of its policy: held ones
of other knobs (its knobs' file edited), of another policy (one shipped again under the same
name) or with no hash recorded are refused, not mixed in. Every episode records the torch build
and CPU kernels it ran on (since 2026-11-27). `repeat_held.py` checks that new code repeats held
episodes.
Writes `<out-dir>/frontier_seedsA-B.json` and `.png` for the seeds asked for. The default
`<out-dir>` is `experiments/growth-frontier/results/<task>/default_recipe` (`<task>` for the
`2026-11-27` recipe). Episodes of another recipe in the folder are refused.

Usage: python experiments/growth-frontier/frontier.py --task shapes --seeds 200:210 [--workers N]
           [--widths 4:13] [--start-widths 8 4] [--arms heuristic naive ...] [--recipe default]
           [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import bisect
import concurrent.futures
import dataclasses
import json
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from esper.karn import estimate, paired_difference, write_json_atomic
from esper.karn.rundir import read_jsonl
from esper.kasmina import Topology
from esper.leyline import GateThresholds
from esper.runs.common import UsageError, check_heuristic_pins, legacy_knobs, torch_build
from esper.runs.config import HostTraining, jsonable, read_config_file
from esper.runs.eval_run import ControllerSpec, EpisodeJob, heuristic_from_file, naive_schedule, parse_seeds, run_one
from esper.runs.grow_run import DEFAULT_MAX_GERMINATIONS
from esper.simic.checkpoint import policy_sha256
from esper.tamiyo import PREFERRED_BLUEPRINTS, HeuristicConfig, trained_policy_path, tuned_heuristic
from esper.tolaria import TASKS, EnvConfig, TaskSpec, get_task

RESULTS = Path(__file__).parent / "results"
WIDTH_FIRST = ("widen_25", "widen_50")
NAIVE = "naive:widen_25@5"
DEFAULT_WIDTHS = {"shapes": "4:13", "pydoc": "32:97:16"}
"""Static sweeps: shapes widths 4 to 12 (the default 8, half of it 4); pydoc d_model 32 to 96."""
DEFAULT_ARMS = ("heuristic", "heuristic+width", "naive", "policy:shapes")
RESIDUAL_KNOBS = {"shapes": Path(__file__).parent / "heuristic_shapes_residual.toml"}
"""Where a task's heuristic arms keep knobs other than today's tuned default (`residual_heuristic`)."""


@dataclasses.dataclass(frozen=True)
class Arm:
    """One point of the frontier: a controller on a host started at `width`."""

    name: str
    width: int

    @property
    def key(self) -> str:
        return f"{self.name}@{self.width}"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How every arm of a frontier trains, so a folder's episodes are of one recipe."""

    name: str
    lr_warmup_epochs: int | None
    """None: the task's own warm-up (`TaskSpec.warmup_for`), as `esper eval` runs it."""
    gates: GateThresholds
    folder: str
    """Under `results/<task>/`."""


RECIPES = {
    "default": Recipe("default", None, GateThresholds(), "default_recipe"),
    "2026-11-27": Recipe("2026-11-27", 0, GateThresholds(keep_reading="accuracy"), ""),
}
"""`2026-11-27`: the first frontier's recipe, before `shapes` warmed up for 3 of its 40 epochs
(2026-11-28) and while seeds were kept or culled on the accuracy reading (until 2026-11-27). A
held row without a recipe ran it."""
FIRST_RECIPE = RECIPES["2026-11-27"]

PINNED_ARM = (
    "heuristic:experiments/growth-frontier/heuristic_shapes_w10_pinned.toml"
    "~compute_budget=1.54,probation_cull_contribution=-0.5,fossilize_min_contribution=-0.5"
)
"""C_J, the grower that met the growth bar against the static host of its own size, with the
gates its evals ran under (run from the repository's root)."""


HALF_WIDTH_ARM = (
    "heuristic:experiments/growth-frontier/heuristic_shapes_double_pinned.toml"
    "~compute_budget=3.2,probation_cull_contribution=-0.5,fossilize_min_contribution=-0.5"
)
"""C_M, the literature's regime: from half width, `widen_100` in every slot under 0.85 of static
width 8's training FLOPs (3.2 runs of width 4), so that kept it ends as width 8. It runs from half
the task's width only: from width 8 the same budget would buy a width-16 host."""


def default_arms(task: TaskSpec, recipe: Recipe, starts: list[int]) -> list[Arm]:
    """The growing arms of a frontier run without `--arms`: every default arm from each start
    width, and on `shapes` at the default recipe C_J from each and C_M from half width."""
    names = [a for a in DEFAULT_ARMS if not a.startswith("policy:") or a == f"policy:{task.name}"]
    today_on_shapes = task.name == "shapes" and recipe.name == "default"
    arms = [Arm(n, s) for s in starts for n in names + ([PINNED_ARM] if today_on_shapes else [])]
    half = task.host_width // 2
    return arms + ([Arm(HALF_WIDTH_ARM, half)] if today_on_shapes and half in starts else [])


def gate_thresholds(arm_name: str, recipe: Recipe = FIRST_RECIPE) -> GateThresholds:
    """The thresholds an arm's name sets after `~` (`KEY=VALUE,...`), over the recipe's."""
    given = arm_name.partition("~")[2]
    if not given:
        return recipe.gates
    fields = {f.name: f.type for f in dataclasses.fields(GateThresholds)}
    values: dict[str, Any] = {}
    for pair in given.split(","):
        key, _, value = pair.partition("=")
        if key not in fields:
            raise UsageError(f"--arms {arm_name!r}: unknown gate threshold {key!r}; choose from: {' '.join(fields)}")
        kind = str(fields[key])
        if kind == "str":
            values[key] = value
            continue
        if "None" in kind and value.lower() == "none":
            values[key] = None
            continue
        try:
            values[key] = (float if "float" in kind else int)(value)
        except ValueError:
            raise UsageError(f"--arms {arm_name!r}: {key} takes a number, got {value!r}") from None
    try:
        return dataclasses.replace(recipe.gates, **values)
    except ValueError as exc:
        raise UsageError(f"--arms {arm_name!r}: {exc}") from None


def residual_heuristic(task: TaskSpec) -> HeuristicConfig:
    """The frontier's heuristic: the knobs of the residual search where the task's default has
    moved on (shapes: the width search's winner since 2026-11-27), so the held episodes of its
    heuristic arms stay today's; elsewhere the task's tuned heuristic."""
    path = RESIDUAL_KNOBS.get(task.name)
    if path is None:
        return tuned_heuristic(task.name)
    return HeuristicConfig().with_knobs(read_config_file(str(path))["heuristic"])


def arm_heuristic(task: TaskSpec, arm_name: str) -> HeuristicConfig | None:
    """The knobs a heuristic arm runs with (None for the other arms): the residual heuristic
    (`residual_heuristic`), with the width blueprints first for `heuristic+width`; a file's
    over the task's tuned knobs for `heuristic:FILE`."""
    name = arm_name.partition("~")[0]
    if name.startswith("heuristic:"):
        return heuristic_from_file(name.partition(":")[2], tuned_heuristic(task.name))
    if name not in ("heuristic", "heuristic+width"):
        return None
    heuristic = residual_heuristic(task)
    if name == "heuristic+width":
        rest = [b for b in heuristic.blueprint_order or PREFERRED_BLUEPRINTS[task.topology] if b not in WIDTH_FIRST]
        heuristic = dataclasses.replace(heuristic, blueprint_order=(*WIDTH_FIRST, *rest))
    return heuristic


def job(task: TaskSpec, arm: Arm, seed: int, epochs: int, recipe: Recipe = FIRST_RECIPE) -> EpisodeJob:
    """The episode `esper eval` would run for this arm and seed."""
    heuristic = arm_heuristic(task, arm.name) or residual_heuristic(task)  # read by heuristic arms only
    blueprints = None
    name = arm.name.partition("~")[0]
    spec = ControllerSpec(name, "static")
    if name == "heuristic":
        spec = ControllerSpec("heuristic", "heuristic")
    elif name == "heuristic+width":
        spec = ControllerSpec("heuristic", "heuristic")
        blueprints = heuristic.blueprint_order
    elif name.startswith("heuristic:"):
        spec = ControllerSpec(name, "heuristic")  # the knobs read from the file travel in `heuristic`
    elif name.partition(":")[0] == "naive":
        naive = NAIVE if name == "naive" else name
        spec = ControllerSpec(naive, "naive", naive.partition(":")[2])
    elif name.startswith("policy:"):
        spec = ControllerSpec(name, "policy", str(_policy_path(name)))
    env = EnvConfig(
        task,
        torch.device("cpu"),
        epochs,
        task.slot_names,
        0 if spec.kind == "static" else DEFAULT_MAX_GERMINATIONS,
        thresholds=gate_thresholds(arm.name, recipe),
        host_width=arm.width,
        lr_warmup_epochs=recipe.lr_warmup_epochs,
    )
    fields = {f.name: getattr(env, f.name) for f in dataclasses.fields(env) if f.name != "task"}
    host = dataclasses.asdict(HostTraining())
    return EpisodeJob(spec, seed, task.name, host, fields, heuristic, False, None, blueprints)


def _policy_path(name: str) -> Path:
    path = trained_policy_path(name.partition(":")[2])
    if path is None:
        raise UsageError(f"--arms {name}: no shipped policy of that name")
    return path


def arm_label(arm_name: str) -> str:
    """An arm's name in the figure's legend: a knobs file by its stem, gate changes marked."""
    name, tilde, _ = arm_name.partition("~")
    if name.startswith("heuristic:"):
        name = f"heuristic:{Path(name.partition(':')[2]).stem}"
    return name + (" (gates changed)" if tilde else "")


def code_version() -> str:
    """The checkout's commit (`-dirty` with uncommitted changes), so episodes of other code in one
    folder are seen: the summary lists every version its episodes ran."""
    root = Path(__file__).resolve().parents[1]
    try:
        found = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return found.stdout.strip()


def row_of(
    arm: Arm, result: dict[str, Any], version: str, heuristic: HeuristicConfig | None, recipe: Recipe = FIRST_RECIPE
) -> dict[str, Any]:
    """An episode's line in `episodes.jsonl`; a heuristic arm's carries its knobs and a policy
    arm's the hash of the policy that played, so episodes of other knobs (a heuristic tuned again)
    or of another policy (one shipped again under the same name) are never taken for today's
    (`check_held_arms`)."""
    return {
        "code": version,
        "recipe": recipe.name,
        "arm": arm.name,
        "start_width": arm.width,
        "seed": result["seed"],
        "test_accuracy": result["test_accuracy"],
        "test_bits_per_byte": result["test_loss"] / math.log(2),
        "params": result["host_params"] + result["seed_params"],
        "train_gflops": result["train_gflops"],
        "measure_gflops": result["measure_gflops"],
        "seconds": result["seconds"],
        "kept": [f"{s['slot']}:{s['blueprint']}" for s in result["grown_seeds"] if s["final_stage"] == "FOSSILIZED"],
        "heuristic": None if heuristic is None else jsonable(heuristic),
        **({"policy_sha256": result["policy_sha256"]} if "policy_sha256" in result else {}),
        **torch_build(),  # CPU episodes repeat only on one torch build and kind of CPU kernels
    }


def held_knobs(row: dict[str, Any]) -> dict[str, Any] | None:
    """A held episode's heuristic knobs as it ran: a knob added since, absent from the row, at the
    value such a run had (`legacy_knobs`)."""
    if row.get("heuristic") is None:
        return None
    return legacy_knobs({"heuristic": row["heuristic"]})["heuristic"]


def held_recipe(row: dict[str, Any]) -> str:
    return row.get("recipe", FIRST_RECIPE.name)


def check_held_arms(
    task: TaskSpec, rows: list[dict[str, Any]], arms: list[Arm], log: Path, recipe: Recipe = FIRST_RECIPE
) -> None:
    """Held episodes must have run by the recipe asked for, a heuristic arm's with the knobs it
    runs with today, and a policy arm's with the policy it loads today; a `UsageError` otherwise
    (the frontier would pair old episodes with new ones under one name)."""
    other_recipe = [r for r in rows if held_recipe(r) != recipe.name]
    if other_recipe:
        raise UsageError(
            f"{len(other_recipe)} held episodes in {log} ran by the recipe {held_recipe(other_recipe[0])!r}, "
            f"not {recipe.name!r}; give that --recipe, or another --out-dir"
        )
    for name in sorted({a.name for a in arms}):
        knobs = arm_heuristic(task, name)
        if knobs is not None:
            today = jsonable(knobs)
            other = [r for r in rows if r["arm"] == name and held_knobs(r) != today]
            if other:
                raise UsageError(
                    f"{len(other)} held episodes of arm {name!r} in {log} ran with other heuristic knobs than "
                    f"today's ({other[0].get('heuristic')} against {today}); move them aside, or give another --out-dir"
                )
        if name.startswith("policy:"):
            digest = policy_sha256(_policy_path(name.partition("~")[0]))
            other = [r for r in rows if r["arm"] == name and r.get("policy_sha256") != digest]
            if other:
                played = other[0].get("policy_sha256")
                raise UsageError(
                    f"{len(other)} held episodes of arm {name!r} in {log} were played by another policy than "
                    f"today's (sha256 {played[:12] + '...' if played else 'not recorded'} against {digest[:12]}...); "
                    "move them aside, or give another --out-dir"
                )


def run_episodes(
    task: TaskSpec, arms: list[Arm], seeds: list[int], epochs: int, workers: int, out: Path, recipe: Recipe
) -> list[dict]:
    """Every (arm, seed) episode not yet in `out/episodes.jsonl`, appended there as each ends."""
    log = out / "episodes.jsonl"
    rows = read_jsonl(log) if log.exists() else []
    check_held_arms(task, rows, arms, log, recipe)
    done = {(r["arm"], r["start_width"], r["seed"]) for r in rows}
    todo = [(a, s) for a in arms for s in seeds if (a.name, a.width, s) not in done]
    print(f"frontier: {len(rows)} episodes held, {len(todo)} to run, {workers} worker(s)", file=sys.stderr, flush=True)
    context, version = multiprocessing.get_context("spawn"), code_version()
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool, log.open("a") as sink:
        futures = {pool.submit(run_one, job(task, arm, seed, epochs, recipe)): arm for arm, seed in todo}
        for future in concurrent.futures.as_completed(futures):
            arm = futures[future]
            row = row_of(arm, future.result(), version, arm_heuristic(task, arm.name), recipe)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            rows.append(row)
            print(
                f"{row['arm']}@{row['start_width']} seed {row['seed']}: test {row['test_accuracy']:.2f}% "
                f"params {row['params']:,} train {row['train_gflops']:,.0f} GFLOPs",
                file=sys.stderr,
                flush=True,
            )
    return rows


# --------------------------------------------------------------------------- the front
@dataclasses.dataclass(frozen=True)
class Metric:
    """What the front is drawn in: test accuracy for images (higher is better), test bits per
    byte for text (lower is better). `gain(a, b)` is how much better a is than b."""

    key: str
    label: str
    higher_is_better: bool

    def gain(self, a: float, b: float) -> float:
        return a - b if self.higher_is_better else b - a


def metric_for(task: TaskSpec) -> Metric:
    if task.topology is Topology.TRANSFORMER:
        return Metric("test_bits_per_byte", "test bits per byte (lower is better)", higher_is_better=False)
    return Metric("test_accuracy", "test accuracy %", higher_is_better=True)


def interpolate(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise-linear in log x through sorted (xs, ys); constant beyond the ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    t = (math.log(x) - math.log(xs[i - 1])) / (math.log(xs[i]) - math.log(xs[i - 1]))
    return ys[i - 1] + t * (ys[i] - ys[i - 1])


def by_seed(rows: list[dict], arm: str, width: int, seeds: list[int]) -> list[dict]:
    found = {r["seed"]: r for r in rows if r["arm"] == arm and r["start_width"] == width}
    return [found[s] for s in seeds]


def paired_gain(metric: Metric, values: list[float], static_rows: list[dict]) -> dict:
    """Paired gain over a static host, seed by seed (positive: growth is better)."""
    theirs = [r[metric.key] for r in static_rows]
    ours, other = (values, theirs) if metric.higher_is_better else (theirs, values)
    return paired_difference(ours, other).to_json()


def summarise(task: TaskSpec, rows: list[dict], arms: list[Arm], widths: list[int], seeds: list[int]) -> dict:
    metric = metric_for(task)
    static = {w: by_seed(rows, "static", w, seeds) for w in widths}
    points = {
        w: {
            "width": w,
            "params": statistics.fmean(r["params"] for r in rs),
            "train_gflops": statistics.fmean(r["train_gflops"] for r in rs),
            metric.key: estimate([r[metric.key] for r in rs]).to_json(),
            "sd": statistics.stdev([r[metric.key] for r in rs]),
        }
        for w, rs in static.items()
    }
    sizes = [points[w]["params"] for w in widths]
    costs = [points[w]["train_gflops"] for w in widths]
    means = [points[w][metric.key]["mean"] for w in widths]
    grown = {}
    for arm in arms:
        if arm.name == "static":
            continue
        rs = by_seed(rows, arm.name, arm.width, seeds)
        values = [r[metric.key] for r in rs]
        mean = statistics.fmean(values)
        params, gflops = statistics.fmean(r["params"] for r in rs), statistics.fmean(r["train_gflops"] for r in rs)
        by_size = min(widths, key=lambda w: abs(math.log(points[w]["params"] / params)))
        by_cost = min(widths, key=lambda w: abs(math.log(points[w]["train_gflops"] / gflops)))

        grown[arm.key] = {
            "arm": arm.name,
            "start_width": arm.width,
            "params": params,
            "train_gflops": gflops,
            metric.key: estimate(values).to_json(),
            "gain_over_front_at_params": metric.gain(mean, interpolate(sizes, means, params)),
            "gain_over_front_at_train_gflops": metric.gain(mean, interpolate(costs, means, gflops)),
            "nearest_static_by_params": by_size,
            "paired_gain_vs_nearest_by_params": paired_gain(metric, values, static[by_size]),
            "train_gflops_over_nearest_by_params": gflops / points[by_size]["train_gflops"],
            "nearest_static_by_train_gflops": by_cost,
            "paired_gain_vs_nearest_by_train_gflops": paired_gain(metric, values, static[by_cost]),
            "kept": [r["kept"] for r in rs],
        }
    used = {(r["arm"], r["start_width"], r["seed"]) for a in arms for r in by_seed(rows, a.name, a.width, seeds)}
    return {
        "task": task.name,
        "code": sorted({r["code"] for r in rows if (r["arm"], r["start_width"], r["seed"]) in used}),
        "metric": metric.key,
        "metric_label": metric.label,
        "seeds": seeds,
        "static": list(points.values()),
        "grown": grown,
    }


# --------------------------------------------------------------------------- figure
def draw(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    static, m = summary["static"], summary["metric"]
    for ax, key, label in ((axes[0], "params", "final parameters"), (axes[1], "train_gflops", "training GFLOPs")):
        xs = [p[key] for p in static]
        ys = [p[m]["mean"] for p in static]
        sds = [p["sd"] for p in static]
        ax.errorbar(xs, ys, yerr=sds, color="0.3", marker="o", capsize=3, label="static hosts (seed SD)")
        for p in static:
            ax.annotate(f"w{p['width']}", (p[key], p[m]["mean"]), fontsize=7, xytext=(3, -10),
                        textcoords="offset points", color="0.3")  # fmt: skip
        for i, g in enumerate(summary["grown"].values()):
            low, high = g[m]["ci95"]
            mean = g[m]["mean"]
            err = [[mean - low], [high - mean]] if low is not None else None
            ax.errorbar([g[key]], [mean], yerr=err, marker="os^Dv<>"[i % 7], color=plt.cm.tab20(i % 20), capsize=3,
                        linestyle="none", label=f"{arm_label(g['arm'])} from w{g['start_width']} (95% CI)")  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel(label + " (log)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"{summary['metric_label']} (mean over seeds)")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=3)  # below the panels: no point hidden
    seeds = summary["seeds"]
    fig.suptitle(
        f"{summary['task']}: grown hosts against the static front, seeds {seeds[0]}..{seeds[-1]}. "
        "A grown point on the better side of the grey front beats a static host of its size (left) "
        "or of its training compute (right).",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.05 + 0.025 * math.ceil(len(labels) / 3), 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- command line
def parse_widths(text: str) -> list[int]:
    try:
        bounds = [int(v) for v in text.split(":")]
        widths = list(range(*bounds))
    except (TypeError, ValueError):
        raise UsageError(f"--widths {text!r}: expected A:B or A:B:STEP, as in Python (4:13)") from None
    if len(widths) < 2 or widths[0] < 1:
        raise UsageError(f"--widths {text!r}: a front needs at least two widths >= 1")
    return widths


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="shapes", help=f"one of: {' '.join(TASKS)} (default shapes)")
    parser.add_argument("--seeds", default="200:210", help="A:B, held-out seeds A..B-1 (default 200:210)")
    parser.add_argument("--widths", help="static sweep A:B[:STEP] (default shapes 4:13, pydoc 32:97:16)")
    parser.add_argument("--start-widths", type=int, nargs="+", help="growing arms' start widths")
    parser.add_argument("--arms", nargs="+", help=f"growing arms (default: {' '.join(DEFAULT_ARMS)})")
    parser.add_argument("--max-epochs", type=int, help="episode length (default: the task's)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--recipe", default="default", choices=list(RECIPES), help="how every arm trains (default: Esper's defaults)"
    )
    parser.add_argument(
        "--out-dir",
        help="where episodes, JSON and figure go (default: the recipe's, experiments/growth-frontier/results/TASK/"
        "default_recipe, or results/TASK for 2026-11-27)",
    )
    return parser.parse_args(argv)


def resolve(args: argparse.Namespace) -> tuple[TaskSpec, list[Arm], list[int], list[int], int, Path, Recipe]:
    """The task, arms, static widths, seeds, epochs and output folder; `UsageError` on bad input."""
    if args.task not in TASKS:
        raise UsageError(f"--task {args.task!r}: choose from: {' '.join(TASKS)}")
    task = get_task(args.task)
    if (task.name not in DEFAULT_WIDTHS and args.widths is None) or task.needs_data_dir:
        raise UsageError(f"--task {args.task!r}: the frontier runs on the embedded tasks (shapes, pydoc)")
    seeds = list(parse_seeds(args.seeds))
    if len(seeds) < 2:
        raise UsageError(f"--seeds {args.seeds!r}: a front with its seed spread needs at least 2 seeds")
    widths = parse_widths(
        args.widths or DEFAULT_WIDTHS.get(task.name, f"{task.host_width // 2}:{task.host_width * 3 // 2 + 1}")
    )
    starts = args.start_widths or (
        [task.host_width, task.host_width // 2] if task.name == "shapes" else [task.host_width]
    )
    recipe = RECIPES[args.recipe]
    grown = [Arm(n, s) for s in starts for n in args.arms] if args.arms else default_arms(task, recipe, starts)
    for given in sorted({a.name for a in grown}):
        name = given.partition("~")[0]
        if name not in DEFAULT_ARMS and not name.startswith(("naive:", "heuristic:")):
            raise UsageError(
                f"--arms {given!r}: choose from: {' '.join(DEFAULT_ARMS)} naive:BLUEPRINT@EPOCH heuristic:FILE [~GATES]"
            )
        if name.startswith("naive:"):
            naive_schedule(name, name.partition(":")[2])
        gate_thresholds(given, recipe)
    for w in (*widths, *starts):
        if w < 1:
            raise UsageError(f"widths must be >= 1, got {w}")
    arms = [Arm("static", w) for w in widths] + grown
    for arm in arms:
        if arm.name.startswith("heuristic:"):
            knobs = arm_heuristic(task, arm.name)
            check_heuristic_pins(task, knobs, task.slot_names, None, arm.width, f"--arms {arm.name} ")
    epochs = args.max_epochs or task.max_epochs
    if epochs < 1 or args.workers < 1:
        raise UsageError(f"--max-epochs and --workers must be >= 1, got {epochs} and {args.workers}")
    out = Path(args.out_dir) if args.out_dir else RESULTS / task.name / recipe.folder
    return task, arms, widths, seeds, epochs, out, recipe


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        task, arms, widths, seeds, epochs, out, recipe = resolve(args)
        out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        rows = run_episodes(task, arms, seeds, epochs, args.workers, out, recipe)
    except UsageError as exc:
        print(f"frontier: error: {exc}", file=sys.stderr)
        return 2
    summary = summarise(task, rows, arms, widths, seeds)
    summary.update(
        {
            "recipe": recipe.name,
            "max_epochs": epochs,
            "threads_per_episode": 1,
            "seconds_this_run": round(time.perf_counter() - start, 1),
        }
    )
    summary.update(torch_build())
    stem = out / f"frontier_seeds{seeds[0]}-{seeds[-1] + 1}"
    write_json_atomic(stem.with_suffix(".json"), summary)
    draw(summary, stem.with_suffix(".png"))
    m = summary["metric"]
    print(f"{'arm@start width':>24}  {m:>18}  {'params':>9}  {'GFLOPs':>8}  gain over the front (size, compute)")
    for key, g in summary["grown"].items():
        d = g["paired_gain_vs_nearest_by_params"]
        print(
            f"{key:>24}  {g[m]['mean']:>18.3f}  {g['params']:>9,.0f}  {g['train_gflops']:>8,.0f}  "
            f"{g['gain_over_front_at_params']:+.3f}, {g['gain_over_front_at_train_gflops']:+.3f}; "
            f"paired vs static w{g['nearest_static_by_params']}: {d['mean']:+.3f} "
            f"[{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] on {g['train_gflops_over_nearest_by_params']:.2f}x its FLOPs"
        )
    print(f"frontier: {stem.with_suffix('.json')}, {stem.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
