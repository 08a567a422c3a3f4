"""Simic: learning the controller. Rewards, the rollout buffer, GAE, the PPO loss and update,
the vectorized trainer that steps many morphogenetic envs together, and checkpoints (one module
owns their schema, the learner state they hold, and the checks a resume needs).

The PPO core (`buffer`, `advantages`, `loss`, `ppo`, `normalizer`) knows nothing
of hosts or seeds: the same code trains on any environment with a discrete or multi-discrete
action space (see `esper.simic.gym`).
"""

from esper.simic.advantages import compute_gae
from esper.simic.buffer import RolloutBuffer
from esper.simic.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from esper.simic.controller import PolicyController
from esper.simic.loss import PPOLossConfig, PPOLossOutput, ppo_loss
from esper.simic.normalizer import RunningMeanStd
from esper.simic.ppo import PPOConfig, UpdateStats, ppo_update
from esper.simic.rewards import REWARD_MODES, RewardBreakdown, RewardConfig, RewardFunction

__all__ = [
    "REWARD_MODES",
    "CheckpointError",
    "PPOConfig",
    "PPOLossConfig",
    "PPOLossOutput",
    "PolicyController",
    "RewardBreakdown",
    "RewardConfig",
    "RewardFunction",
    "RolloutBuffer",
    "RunningMeanStd",
    "UpdateStats",
    "compute_gae",
    "load_checkpoint",
    "ppo_loss",
    "ppo_update",
    "save_checkpoint",
]
