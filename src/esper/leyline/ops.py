"""Lifecycle operations a controller can ask for, and the alpha schedules of blending."""

from __future__ import annotations

from enum import IntEnum


class LifecycleOp(IntEnum):
    """What a controller does to one slot in one step. Values are stable action indices."""

    WAIT = 0
    GERMINATE = 1
    FOSSILIZE = 2
    CULL = 3


class BlendSchedule(IntEnum):
    """How alpha rises from 0 to 1 over the blending epochs. Chosen at germination."""

    LINEAR = 0
    SIGMOID = 1
