"""Tamiyo: the controller. Signal tracking (per-slot and global training signals in fixed slot
order) and the heuristic policy that decides when, where and what to grow."""

from esper.tamiyo.heuristic import PREFERRED_BLUEPRINTS, HeuristicConfig, HeuristicController
from esper.tamiyo.signals import EpochMeasurements, SignalTracker, SlotSignals, TrainingSignals

__all__ = [
    "PREFERRED_BLUEPRINTS",
    "EpochMeasurements",
    "HeuristicConfig",
    "HeuristicController",
    "SignalTracker",
    "SlotSignals",
    "TrainingSignals",
]
