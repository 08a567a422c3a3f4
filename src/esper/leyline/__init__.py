"""Leyline: the shared contracts every other package speaks.

Seed stages and their allowed transitions, slot ids, lifecycle operations and the named
constants of the lifecycle gates. Nothing here imports torch, so the contracts can be read,
tested and reasoned about without a model.
"""

from esper.leyline.constants import GateThresholds
from esper.leyline.ops import BlendSchedule, Decision, InvalidDecision, LifecycleOp
from esper.leyline.slots import SlotId, parse_slots
from esper.leyline.stages import (
    LIVE_STAGES,
    SEED_BEARING_STAGES,
    TRANSITIONS,
    InvalidTransition,
    SeedStage,
    check_transition,
)

__all__ = [
    "LIVE_STAGES",
    "SEED_BEARING_STAGES",
    "TRANSITIONS",
    "BlendSchedule",
    "Decision",
    "GateThresholds",
    "InvalidDecision",
    "InvalidTransition",
    "LifecycleOp",
    "SeedStage",
    "SlotId",
    "check_transition",
    "parse_slots",
]
