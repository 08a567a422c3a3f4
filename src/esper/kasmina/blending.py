"""Alpha schedules: how a seed's blend weight rises from 0 to 1. Pure math, no torch."""

from __future__ import annotations

import math

from esper.leyline import BlendSchedule

SIGMOID_STEEPNESS: float = 8.0
"""Steepness of the sigmoid ramp over the unit interval: most of the rise happens mid-blend."""


def blend_alpha(schedule: BlendSchedule, progress: float) -> float:
    """Alpha at `progress` in [0, 1] through blending; exactly 0 at 0 and exactly 1 at 1."""
    t = min(max(progress, 0.0), 1.0)
    if schedule is BlendSchedule.LINEAR:
        return t
    if schedule is BlendSchedule.SIGMOID:

        def raw(u: float) -> float:
            return 1.0 / (1.0 + math.exp(-SIGMOID_STEEPNESS * (u - 0.5)))

        lo, hi = raw(0.0), raw(1.0)
        return (raw(t) - lo) / (hi - lo)
    raise ValueError(f"unknown blend schedule {schedule!r}")
