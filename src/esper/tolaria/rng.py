"""The env's randomness: private RNG streams, so that nothing it builds or draws touches the
global RNG, and each stream (data order, initialisation) is independent of the others."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def seeded_init(rng_seed: int) -> Iterator[None]:
    """Build modules from a private CPU RNG stream; the global CPU and CUDA RNG states are
    left as they were (modules are built on the CPU, then moved)."""
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(rng_seed)
        yield


def draw_rng_seed(generator: torch.Generator) -> int:
    """A new RNG seed from `generator`, for a stream of its own."""
    return int(torch.randint(0, 2**62, (1,), generator=generator))
