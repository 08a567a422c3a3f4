"""Tamiyo: the controller. The observation a learned policy sees, its masked factored action
space, the recurrent policy network, and the heuristic policy that decides when, where and what
to grow. It reads the training signals of `esper.leyline`."""

from esper.tamiyo.actions import HEADS, ActionSpace
from esper.tamiyo.features import GLOBAL_FEATURES, ObservationLayout
from esper.tamiyo.heuristic import PREFERRED_BLUEPRINTS, HeuristicConfig, HeuristicController
from esper.tamiyo.policy import RecurrentPolicy
from esper.tamiyo.spaces import PolicySpaces

__all__ = [
    "GLOBAL_FEATURES",
    "HEADS",
    "PREFERRED_BLUEPRINTS",
    "ActionSpace",
    "HeuristicConfig",
    "HeuristicController",
    "ObservationLayout",
    "PolicySpaces",
    "RecurrentPolicy",
]
