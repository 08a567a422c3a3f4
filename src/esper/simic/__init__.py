"""Simic: learning the controller. Its PPO core (distributions, rollout buffer with GAE) knows
nothing of hosts or seeds, so the same code trains on any environment with a discrete or
multi-discrete action space."""

from esper.simic.advantages import compute_gae
from esper.simic.distributions import MaskedCategorical
from esper.simic.loss import PPOLossConfig, PPOLossOutput, ppo_loss
from esper.simic.normalizer import RunningMeanStd

__all__ = ["MaskedCategorical", "PPOLossConfig", "PPOLossOutput", "RunningMeanStd", "compute_gae", "ppo_loss"]
