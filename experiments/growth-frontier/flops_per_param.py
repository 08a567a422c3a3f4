"""Where a parameter is cheap: training FLOPs per parameter of each `shapes` block, and the
epoch after which a width seed costs fewer FLOPs than the static host of the grown size.

Point 3 of the growth issue asks a grown host to match the static host of its final size on
fewer training FLOPs. Along the static family (a uniform width `w`, blocks of w, 2w, 4w channels),
parameters and FLOPs rise together; a width seed adds parameters at the FLOPs-per-parameter rate
of its block's resolution (16x16, 8x8 or 4x4 maps), for the epochs it trains. So a kept width seed
costs fewer FLOPs than the static host it enlarges the run towards only if it arrives late enough:

    (E - e) * dF_seed  <  E * kappa * dP_seed    ->    e  >  E * (1 - kappa * dP_seed / dF_seed)

with `E` the episode's epochs, `dF_seed` and `dP_seed` the seed's added training FLOPs per sample
and parameters once merged, and `kappa` the static family's marginal FLOPs per parameter between
the widths around the grown size. Seeds' own cost before their merge (isolated training,
blending, measurement) is left out: it only moves the break-even later.

The grown network is counted as the plain network a merge leaves (`ConvBlock`s of the grown
widths, then the classifier head), with torch's FLOP counter (forward and backward of one sample,
as `esper.tolaria.compute` counts an episode). No episode is trained: this is arithmetic, and
it runs in seconds.

Usage: python experiments/growth-frontier/flops_per_param.py [--out FILE]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from esper.karn import write_json_atomic
from esper.kasmina.blueprints import WIDTH_FRACTIONS
from esper.kasmina.hosts import CNN_POOLED_BLOCKS, ClassifierHead, ConvBlock
from esper.tolaria import get_task
from esper.tolaria.compute import static_train_gflops

IMAGE = (3, 16, 16)
CLASSES = 10
SLOTS = ("early", "mid", "late")
DEFAULT_OUT = Path(__file__).parent / "results" / "shapes" / "flops_per_param.json"


def network(widths: tuple[int, ...]) -> nn.Sequential:
    """The plain CNN of per-block widths `widths` (a static host of width w is (w, 2w, 4w))."""
    blocks: list[nn.Module] = []
    c_in = IMAGE[0]
    for i, c in enumerate(widths):
        blocks.append(ConvBlock(c_in, c, pool=i < CNN_POOLED_BLOCKS))
        c_in = c
    return nn.Sequential(*blocks, ClassifierHead(c_in, CLASSES))


def params(widths: tuple[int, ...]) -> int:
    return sum(p.numel() for p in network(widths).parameters())


def train_flops_per_sample(widths: tuple[int, ...]) -> int:
    """Forward and backward of one sample, as an episode's training FLOPs are counted."""
    net = network(widths).train()
    x, y = torch.randn(1, *IMAGE), torch.zeros(1, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        nn.functional.cross_entropy(net(x), y).backward()
    return counter.get_total_flops()


def static_widths(width: int) -> tuple[int, ...]:
    return (width, 2 * width, 4 * width)


def grown_shapes(base: tuple[int, ...], statics: dict[int, dict], epochs: int, grow_at: int) -> list[dict]:
    """Every shape the width seeds make of `base` (each block as it is, or widened by one of the
    sizes), grown at `grow_at` and kept, whose run costs fewer training FLOPs than the static host
    nearest its final size (one of `statics`, larger than the start and short of the widest, so
    that it is the nearest of all): which shapes point 3 allows."""
    base_flops = train_flops_per_sample(base)
    sizes = [0.0, *WIDTH_FRACTIONS.values()]
    found = []
    for fractions in itertools.product(sizes, repeat=len(base)):
        grown = tuple(c + round(c * f) for c, f in zip(base, fractions, strict=True))
        n = params(grown)
        nearest = min(statics, key=lambda w: abs(statics[w]["params"] - n))
        run = grow_at * base_flops + (epochs - grow_at) * train_flops_per_sample(grown)
        ratio = run / (epochs * statics[nearest]["train_flops_per_sample"])
        if min(statics) < nearest < max(statics) and ratio < 1:
            found.append({"widths": list(grown), "params": n, "nearest_static_width": nearest, "flops_ratio": ratio})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--start-width", type=int, default=8)
    parser.add_argument("--grow-at", type=int, default=5, help="the epoch the grown shapes grow at (default 5)")
    args = parser.parse_args(argv)

    task = get_task("shapes")
    epochs = task.max_epochs
    samples = 10_000  # shapes trains on 10,000 images an epoch
    statics = {}
    for width in range(args.start_width, args.start_width + 7):
        w = static_widths(width)
        statics[width] = {"params": params(w), "train_flops_per_sample": train_flops_per_sample(w)}
    if statics[args.start_width]["params"] != task.host_params(args.start_width):
        raise SystemExit("the plain network's parameters differ from the task host's")
    data = task.load_data(None)
    episode_gflops = static_train_gflops(task, args.start_width, data, epochs)
    counted = statics[args.start_width]["train_flops_per_sample"] * samples * epochs / 1e9
    if abs(counted - episode_gflops) > 1e-6 * episode_gflops:
        raise SystemExit(f"per-sample count {counted} differs from the episode's {episode_gflops}")

    widths = sorted(statics)
    kappas = {
        f"{a}-{b}": (statics[b]["train_flops_per_sample"] - statics[a]["train_flops_per_sample"])
        / (statics[b]["params"] - statics[a]["params"])
        for a, b in itertools.pairwise(widths)
    }
    base = static_widths(args.start_width)
    base_params, base_flops = params(base), train_flops_per_sample(base)
    kappa = kappas[f"{args.start_width}-{args.start_width + 1}"]  # the step a first seed competes with
    seeds = []
    for index, slot in enumerate(SLOTS):
        for name, fraction in WIDTH_FRACTIONS.items():
            grown = tuple(c + round(c * fraction) if i == index else c for i, c in enumerate(base))
            d_params = params(grown) - base_params
            d_flops = train_flops_per_sample(grown) - base_flops
            break_even = epochs * (1 - kappa * d_params / d_flops)
            seeds.append(
                {
                    "slot": slot,
                    "blueprint": name,
                    "grown_widths": list(grown),
                    "added_params": d_params,
                    "added_train_flops_per_sample": d_flops,
                    "flops_per_added_param": d_flops / d_params,
                    "break_even_epoch": max(0.0, break_even),
                }
            )
    shapes = grown_shapes(base, statics, epochs, args.grow_at)
    record = {
        "what": "training FLOPs per parameter of each shapes block's width seed, against the static family's",
        "script": "experiments/growth-frontier/flops_per_param.py",
        "torch": torch.__version__,
        "episode_epochs": epochs,
        "samples_per_epoch": samples,
        "start_width": args.start_width,
        "static": {
            str(w): {**v, "flops_per_param": v["train_flops_per_sample"] / v["params"]} for w, v in statics.items()
        },
        "static_marginal_flops_per_param": kappas,
        "kappa_used": kappa,
        "width_seeds": seeds,
        "grow_at": args.grow_at,
        "grown_shapes_cheaper_than_their_static": shapes,
        "check": {"static_episode_gflops": episode_gflops, "counted_here": counted},
    }
    write_json_atomic(args.out, record)
    per_param = base_flops / base_params
    print(
        f"static width {args.start_width}: {base_params:,} params, {per_param:.1f} training FLOPs per param per sample"
    )
    print("static family, marginal FLOPs per param: " + ", ".join(f"{k}: {v:.1f}" for k, v in kappas.items()))
    print(f"{'slot':6s} {'seed':9s} {'+params':>8s} {'FLOPs/param':>11s} {'break-even epoch':>16s}")
    for s in seeds:
        print(
            f"{s['slot']:6s} {s['blueprint']:9s} {s['added_params']:8,d} {s['flops_per_added_param']:11.1f}"
            f" {s['break_even_epoch']:16.1f}"
        )
    print(f"grown at epoch {args.grow_at}, cheaper in training FLOPs than the static host nearest their size:")
    for g in shapes:
        print(
            f"  {g['widths']}: {g['params']:,} params, nearest static width {g['nearest_static_width']},"
            f" {g['flops_ratio']:.3f} of its FLOPs"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
