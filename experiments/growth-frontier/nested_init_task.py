"""`shapes` with nested host initialisation: a pilot of common random numbers across widths.

Why: a grown host and `matched` (the static host of its final size) are paired by seed, yet
their pairs spread by 4 to 5 points, because the two runs start from unrelated draws. Here
every weight row of a host is drawn from a stream of its own, named by the layer, the row and
the episode's initialisation seed, and a wider host's rows read further along the same streams.
So the static hosts of widths 8 and 10 of one seed share the draws of their first 8 (16, 32)
channels, scaled to each layer's fan-in. Each host's weights keep PyTorch's default law
(uniform in +-1/sqrt(fan_in)), so the expected difference of a pair is unchanged; only its
spread can shrink. The pilot (README, "Every approach tried") found that it shrinks too little.

    PYTHONPATH=experiments/growth-frontier esper eval --task nested_init_task:shapes_nested ...
"""

from __future__ import annotations

import dataclasses
import hashlib
import math

import torch
from torch import nn

from esper.kasmina.hosts import CNNHost
from esper.tolaria import TaskSpec, get_task


def _row_seed(base: int, name: str, row: int) -> int:
    digest = hashlib.blake2b(f"{base}:{name}:{row}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@torch.no_grad()
def nested_init_(host: nn.Module, base: int) -> None:
    """Redraw every convolution and Linear layer row by row from its own stream (in, then kernel
    order), so a prefix of a wider layer's rows and columns is the narrower layer's draw."""
    for module_name, module in host.named_modules():
        if not isinstance(module, (nn.Conv2d, nn.Linear)) or module.weight.is_meta:
            continue
        weight = module.weight
        bound = 1 / math.sqrt(weight[0].numel())
        for row in range(weight.shape[0]):
            stream = torch.Generator().manual_seed(_row_seed(base, f"{module_name}.weight", row))
            weight[row] = (torch.rand(weight[0].numel(), generator=stream) * 2 - 1).view_as(weight[row]) * bound
            if module.bias is not None:
                stream = torch.Generator().manual_seed(_row_seed(base, f"{module_name}.bias", row))
                module.bias[row] = (torch.rand(1, generator=stream) * 2 - 1) * bound


def _nested_host(width: int) -> CNNHost:
    # The base is the first draw of the episode's initialisation stream, so it is the same for
    # every width of one seed.
    base = int(torch.randint(0, 2**62, (1,), device="cpu"))
    host = CNNHost(in_channels=3, num_classes=10, width=width, depth=3)
    nested_init_(host, base)
    return host


def shapes_nested() -> TaskSpec:
    return dataclasses.replace(get_task("shapes"), make_host=_nested_host)
