"""Leyline: the shared contracts every other package speaks.

Seed stages and their allowed transitions, slot ids, lifecycle operations, the named constants
of the lifecycle gates and the gradient predicates they read, and the training signals an
environment gives a controller: the contract between the two. Nothing here imports torch, so the
contracts can be read, tested and reasoned about without a model.
"""

from esper.leyline.constants import GateThresholds, gradient_is_exploding, gradient_is_healthy, gradient_is_vanishing
from esper.leyline.ops import BlendSchedule, Decision, InvalidDecision, LifecycleOp
from esper.leyline.signals import BudgetProjections, SlotSignals, TrainingSignals
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
    "BudgetProjections",
    "Decision",
    "GateThresholds",
    "InvalidDecision",
    "InvalidTransition",
    "LifecycleOp",
    "SeedStage",
    "SlotId",
    "SlotSignals",
    "TrainingSignals",
    "check_transition",
    "gradient_is_exploding",
    "gradient_is_healthy",
    "gradient_is_vanishing",
    "parse_slots",
]
