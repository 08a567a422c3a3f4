"""Tamiyo: the controller. The observation a learned policy sees, its masked factored action
space and the distributions over it, the recurrent policy network (which acts and evaluates),
the heuristic policy that decides when, where and what to grow (with its tuned knobs per task),
the static and random baselines, the policies shipped per task, and the diagnostics of a learned
controller's decisions. It reads the training signals of `esper.leyline`."""

from esper.tamiyo.actions import HEADS, ActionSpace
from esper.tamiyo.baselines import NaiveGrowthController, RandomController, StaticController
from esper.tamiyo.distributions import (
    FactoredMasks,
    FactoredSample,
    MaskedCategorical,
    evaluate_factored,
    sample_factored,
)
from esper.tamiyo.features import GLOBAL_FEATURES, ObservationLayout
from esper.tamiyo.heuristic import (
    PREFERRED_BLUEPRINTS,
    HeuristicConfig,
    HeuristicController,
    heuristic_rotation,
    tuned_heuristic,
)
from esper.tamiyo.policy import RecurrentPolicy
from esper.tamiyo.spaces import PolicySpaces
from esper.tamiyo.trained import is_policy_name, trained_policy_names, trained_policy_path, trained_policy_record

__all__ = [
    "GLOBAL_FEATURES",
    "HEADS",
    "PREFERRED_BLUEPRINTS",
    "ActionSpace",
    "FactoredMasks",
    "FactoredSample",
    "HeuristicConfig",
    "HeuristicController",
    "MaskedCategorical",
    "NaiveGrowthController",
    "ObservationLayout",
    "PolicySpaces",
    "RandomController",
    "RecurrentPolicy",
    "StaticController",
    "evaluate_factored",
    "heuristic_rotation",
    "is_policy_name",
    "sample_factored",
    "trained_policy_names",
    "trained_policy_path",
    "trained_policy_record",
    "tuned_heuristic",
]
