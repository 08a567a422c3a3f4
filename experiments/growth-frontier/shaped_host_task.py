"""`shapes` with a static host of the grown shape: is the growth schedule's result its growth, or
its shape?

The growth schedule `schedule:early=widen_50@5,late=widen_25@5` ends as a plain CNN whose blocks
have 12, 16 and 40 channels (26,494 parameters), while a static host of `shapes` of width w has w,
2w and 4w. A researcher's first question of a grown shape that is not a uniform width
is whether the same shape, trained at full size from epoch 0, does as well. This task is `shapes`
with that host: the literature's "static network of the same final architecture".

    PYTHONPATH=experiments/growth-frontier esper eval --task shaped_host_task:shapes_12_16_40 \
        --controllers static --seeds 150:160 --workers 1

`shapes_12_24_32` is the same for the shape recipe v24p keeps (blocks 12, 24, 32; 26,126
parameters), which `schedule:early=widen_50@12,mid=widen_50@16` grows.

Only the static controller makes sense here: the host's slots keep their names, but the task's
width knobs (`--host.width`, `matched`, `compute`) do not describe this shape. Building the host
at another width raises a ValueError naming it, which `esper` shows as a one-line error.
"""

from __future__ import annotations

import dataclasses
import functools

from esper.kasmina.hosts import CNN_POOLED_BLOCKS, ClassifierHead, ConvBlock, Host, Topology
from esper.tolaria import TaskSpec, get_task

GROWN_BLOCK_WIDTHS = (12, 16, 40)
V24P_BLOCK_WIDTHS = (12, 24, 32)


class ShapedCNNHost(Host):
    """`CNNHost`'s blocks with a width of their own each (the `CNNHost` of width w has w, 2w, 4w)."""

    topology = Topology.CNN

    def __init__(self, block_widths: tuple[int, ...], in_channels: int = 3, num_classes: int = 10) -> None:
        blocks, c_in = [], in_channels
        for i, c in enumerate(block_widths):
            blocks.append(ConvBlock(c_in, c, pool=i < CNN_POOLED_BLOCKS))
            c_in = c
        super().__init__([*blocks, ClassifierHead(c_in, num_classes)], list(block_widths))


def _grown_shape_host(block_widths: tuple[int, ...], width: int) -> ShapedCNNHost:
    default = get_task("shapes").host_width
    if width != default:
        name = "shapes_" + "_".join(map(str, block_widths))
        raise ValueError(f"{name} has one shape, blocks {block_widths}; width {width} is not its own")
    return ShapedCNNHost(block_widths)


def shaped_task(block_widths: tuple[int, ...]) -> TaskSpec:
    """`shapes` whose host has these block widths (a partial, so eval's workers can pickle it)."""
    return dataclasses.replace(get_task("shapes"), make_host=functools.partial(_grown_shape_host, block_widths))


def shapes_12_16_40() -> TaskSpec:
    return shaped_task(GROWN_BLOCK_WIDTHS)


def shapes_12_24_32() -> TaskSpec:
    return shaped_task(V24P_BLOCK_WIDTHS)
