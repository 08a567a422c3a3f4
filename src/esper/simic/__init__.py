"""Simic: learning the controller with PPO.

- The core knows nothing of hosts or seeds: `buffer` (rollout steps and minibatches of whole
  sequences), `advantages` (GAE), `loss` (the clipped objective on named inputs), `update` (the
  PPO update), `normalizer` (running observation statistics), `distributed` (policy data
  parallelism under `torchrun`).
- `loop` is the one collect/update loop; envs plug into it: `morphogenetic_envs` (the
  morphogenetic envs in lockstep, with `rewards`) and `gymnasium_envs` (any Gymnasium vector env
  with a discrete or multi-discrete action space).
- `checkpoint` owns checkpoints (schema, learner state, resume checks); `controller` lets a
  trained policy drive a single env; `gymnasium_adapter` wraps the morphogenetic env as a
  Gymnasium env for other libraries.
"""

from esper.simic.advantages import compute_gae
from esper.simic.buffer import RolloutBuffer
from esper.simic.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from esper.simic.controller import PolicyController
from esper.simic.loss import PPOLossConfig, PPOLossOutput, ppo_loss
from esper.simic.normalizer import RunningMeanStd
from esper.simic.rewards import REWARD_MODES, RewardBreakdown, RewardConfig, RewardFunction
from esper.simic.update import PPOConfig, UpdateStats, ppo_update

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
