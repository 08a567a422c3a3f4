"""Tamiyo: the controller. Signal tracking (per-slot and global training signals in fixed slot
order), the observation a learned policy sees, and the heuristic policy that decides when,
where and what to grow."""

from esper.tamiyo.actions import HEADS, ActionSpace
from esper.tamiyo.features import GLOBAL_FEATURES, ObservationLayout
from esper.tamiyo.heuristic import PREFERRED_BLUEPRINTS, HeuristicConfig, HeuristicController
from esper.tamiyo.policy import RecurrentPolicy
from esper.tamiyo.signals import EpochMeasurements, SignalTracker, SlotSignals, TrainingSignals

__all__ = [
    "GLOBAL_FEATURES",
    "HEADS",
    "PREFERRED_BLUEPRINTS",
    "ActionSpace",
    "EpochMeasurements",
    "HeuristicConfig",
    "HeuristicController",
    "ObservationLayout",
    "RecurrentPolicy",
    "SignalTracker",
    "SlotSignals",
    "TrainingSignals",
]
