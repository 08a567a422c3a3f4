"""Gymnasium vector envs in the PPO loop: the project's own PPO core on any Gymnasium env with a
discrete or multi-discrete action.

Why: the morphogenetic envs have no known optimum, so a learning failure there could be the
task or the learner. Standard control tasks with known solved returns (CartPole-v1: 500) test
the PPO core alone: the same loop (`esper.simic.loop`), policy, sampler, buffer, GAE and update
the morphogenetic trainer uses, with no host or seed knowledge here.

A round is `n_steps` steps of every env; episodes run across rounds (the loop carries the LSTM
state and episode starts). Episode ends follow Gymnasium's two kinds:
- termination: a true terminal, the return bootstraps 0;
- truncation (a time limit): the return bootstraps from V(final observation), read with the
  LSTM state after the step that reached it. The vector env runs in SAME_STEP autoreset mode, so
  the final observation arrives in `info["final_obs"]` on the very step that ended the episode,
  while the returned observation is already the next episode's first.

Rewards are divided by the running spread of the discounted return (`RewardScaler`) before the
policy learns from them; `GymResult.episode_returns` are the env's own, unscaled returns.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium
import numpy as np
import torch
from gymnasium import spaces

from esper.simic.loop import EnvStep, Learner, collect, common_metrics, make_learner, update
from esper.simic.normalizer import RunningMeanStd
from esper.simic.update import PPOConfig
from esper.tamiyo import FactoredMasks, FactoredSample

FINAL_WINDOW = 20
"""`GymResult.final_mean_return` averages this many last completed episodes: enough to smooth
the stochastic policy's episode-to-episode noise, few enough to describe the end of the run."""


# --------------------------------------------------------------------------- spaces
@dataclass(frozen=True)
class ActionCodec:
    """Maps the factored sampler's (N, H) head indices to what the vector env's `step` takes."""

    head_sizes: tuple[int, ...]
    head_names: tuple[str, ...]
    start: np.ndarray
    """(H,) offset of each head's first action (Gymnasium spaces may start above 0)."""
    shape: tuple[int, ...]
    """The shape of one env's action: () for Discrete, nvec's shape for MultiDiscrete."""

    @staticmethod
    def for_space(space: spaces.Space) -> ActionCodec:
        """Discrete(n) is one head of n choices; MultiDiscrete(nvec) one head per entry of nvec."""
        if isinstance(space, spaces.Discrete):
            return ActionCodec((int(space.n),), ("action",), np.array([int(space.start)]), ())
        if isinstance(space, spaces.MultiDiscrete):
            sizes = tuple(int(n) for n in space.nvec.flatten())
            names = tuple(f"action_{k}" for k in range(len(sizes)))
            return ActionCodec(sizes, names, space.start.flatten().astype(np.int64), tuple(space.nvec.shape))
        raise ValueError(f"train_gym supports Discrete and MultiDiscrete action spaces, got {space!r}")

    def decode(self, actions: torch.Tensor) -> np.ndarray:
        """(N, H) head indices -> the batched action: (N,) for Discrete, (N, *nvec.shape) otherwise."""
        values = actions.cpu().numpy().astype(np.int64) + self.start
        return values.reshape(values.shape[0], *self.shape)


def observation_dim(space: spaces.Space) -> int:
    """Box observations are flattened; anything else has no fixed vector form here."""
    if not isinstance(space, spaces.Box):
        raise ValueError(f"train_gym supports Box observation spaces only, got {space!r}")
    return int(np.prod(space.shape, dtype=np.int64))


# --------------------------------------------------------------------------- configuration
def default_ppo(total_rounds: int) -> PPOConfig:
    """The tuned defaults for classic-control tasks (CartPole-v1 reaches >= 475 with them).

    Both schedules span the whole run: the learning rate decays to 0 at the last round, and the
    entropy bonus from 0.01 to 0 with it, which settles the policy at the end (with a constant
    bonus, Acrobot-v1 seed 0 ended at -100.55, its last episodes sampled from a policy still
    paid to stay random; annealed, -78.55). No KL early stop: with
    4 epochs of 4 minibatches the clip alone keeps updates small on these tasks.

    Advantages are not normalized: `RewardScaler` already puts returns at unit scale, and
    normalizing a round whose episodes all went alike (Acrobot-v1 before its first success: -1
    every step) blows value-function noise up to unit-size advantages that outweigh the entropy
    bonus, so the policy drifts away from the uniform exploration that finds the goal.
    """
    return PPOConfig(
        gamma=0.99,
        gae_lambda=0.95,
        learning_rate=1e-3,
        anneal_lr=True,
        anneal_rounds=max(total_rounds, 1),
        update_epochs=4,
        num_minibatches=4,
        clip_coef=0.2,
        vf_coef=0.5,
        ent_coef=0.01,
        ent_coef_final=0.0,
        max_grad_norm=0.5,
        target_kl=None,
        norm_adv=False,
    )


def make_vector_env(
    env_id: str, n_envs: int, make_env: Callable[[], gymnasium.Env] | None = None
) -> gymnasium.vector.VectorEnv:
    """`n_envs` copies in one process, in SAME_STEP autoreset mode (the final observation of an
    episode comes with the step that ended it). `make_env`, when given, replaces the registry."""
    mode = gymnasium.vector.AutoresetMode.SAME_STEP
    if make_env is not None:
        return gymnasium.vector.SyncVectorEnv([make_env] * n_envs, autoreset_mode=mode)
    return gymnasium.make_vec(
        env_id, num_envs=n_envs, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}
    )


class RewardScaler:
    """Divides rewards by the running standard deviation of the discounted return (one running
    return per env, their statistics pooled).

    Why: the policy and value heads share one trunk, and global gradient clipping sees their
    gradients together. Unscaled returns (CartPole's reach 100 at gamma 0.99) make the value
    loss's gradient dominate the clipped norm, and the policy stops learning. Scaling by the
    return's spread (not its mean, which would change what the agent is rewarded for) keeps
    values near unit scale on any task. Episode returns are always reported unscaled.
    """

    def __init__(self, n_envs: int, gamma: float, epsilon: float = 1e-8) -> None:
        self.stats = RunningMeanStd(1)
        self.discounted = np.zeros(n_envs)
        self.gamma, self.epsilon = gamma, epsilon

    def __call__(self, rewards: np.ndarray, ended: np.ndarray) -> np.ndarray:
        self.discounted = self.discounted * self.gamma + rewards
        self.stats.update(torch.as_tensor(self.discounted).reshape(-1, 1))
        self.discounted[ended] = 0.0
        return rewards / math.sqrt(float(self.stats.var[0]) + self.epsilon)


class GymnasiumEnvs:
    """A Gymnasium vector env as `RolloutEnvs`: `n_steps` steps of every env per round."""

    def __init__(
        self, envs: gymnasium.vector.VectorEnv, n_steps: int, gamma: float, rng_seed: int, scale_rewards: bool = True
    ) -> None:
        self.envs, self.max_round_steps = envs, n_steps
        self.n_envs = envs.num_envs
        self.codec = ActionCodec.for_space(envs.single_action_space)
        self.obs_dim = observation_dim(envs.single_observation_space)
        self.reward_scale = RewardScaler(self.n_envs, gamma) if scale_rewards else None
        raw, _ = envs.reset(seed=rng_seed)
        self.raw_obs = as_tensor(raw)
        self.unmasked = FactoredMasks.unmasked(self.n_envs, self.codec.head_sizes)
        self.running_return = np.zeros(self.n_envs)
        self.running_length = np.zeros(self.n_envs, dtype=np.int64)
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []
        self.steps_this_round = 0

    def begin_round(self) -> torch.Tensor:
        """Episodes go on where the last round left them."""
        self.steps_this_round = 0
        self.episodes_before = len(self.episode_returns)
        return torch.zeros(self.n_envs, dtype=torch.bool)

    def acting(self) -> list[int]:
        return list(range(self.n_envs)) if self.steps_this_round < self.max_round_steps else []

    def observe(self, ids: list[int]) -> torch.Tensor:
        return self.raw_obs[ids]

    def masks(self, ids: list[int]) -> FactoredMasks:
        return self.unmasked

    def step(self, ids: list[int], sample: FactoredSample) -> EnvStep:
        raw_next, rewards, terminated, truncated, info = self.envs.step(self.codec.decode(sample.actions))
        rewards = np.asarray(rewards, dtype=np.float64)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool) & ~terminated  # both set: the terminal wins
        ended = terminated | truncated
        learned = rewards if self.reward_scale is None else self.reward_scale(rewards, ended)
        final = None
        if truncated.any():
            final = torch.zeros_like(self.raw_obs)
            for i in np.flatnonzero(truncated):
                final[i] = torch.as_tensor(np.asarray(info["final_obs"][i], dtype=np.float32)).reshape(-1)
        self.record_episodes(rewards, ended)
        self.raw_obs = as_tensor(raw_next)
        self.steps_this_round += 1
        return EnvStep(
            torch.as_tensor(learned, dtype=torch.float32),
            torch.as_tensor(terminated),
            torch.as_tensor(truncated),
            final,
        )

    def record_episodes(self, rewards: np.ndarray, ended: np.ndarray) -> None:
        """Running returns and lengths; an ended episode's are appended in completion order."""
        self.running_return += rewards
        self.running_length += 1
        for i in np.flatnonzero(ended):
            self.episode_returns.append(float(self.running_return[i]))
            self.episode_lengths.append(int(self.running_length[i]))
        self.running_return[ended] = 0.0
        self.running_length[ended] = 0

    def round_metrics(self) -> dict[str, float]:
        new_returns = self.episode_returns[self.episodes_before :]
        new_lengths = self.episode_lengths[self.episodes_before :]
        return {
            "charts/episodic_return": float(np.mean(new_returns)) if new_returns else math.nan,
            "charts/episodic_length": float(np.mean(new_lengths)) if new_lengths else math.nan,
            "charts/episodes": float(len(new_returns)),
            "charts/recent_return": final_mean(self.episode_returns),
        }


def as_tensor(raw: np.ndarray) -> torch.Tensor:
    """(N, ...) observations -> (N, obs_dim) float32."""
    return torch.as_tensor(np.asarray(raw, dtype=np.float32)).reshape(raw.shape[0], -1)


@dataclass
class GymRun:
    """A Gymnasium run: its envs in the loop, and its learner."""

    envs: GymnasiumEnvs
    learner: Learner
    ppo: PPOConfig
    started: float = field(default_factory=time.perf_counter)

    @property
    def policy(self):
        return self.learner.policy


def make_run(
    env_id: str,
    n_envs: int,
    n_steps: int,
    ppo: PPOConfig,
    rng_seed: int = 0,
    hidden: int = 64,
    make_env: Callable[[], gymnasium.Env] | None = None,
    scale_rewards: bool = True,
) -> GymRun:
    """Build the envs (reset with `rng_seed`), a policy initialised from `rng_seed`, and its optimizer."""
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    vector = make_vector_env(env_id, n_envs, make_env)
    try:
        envs = GymnasiumEnvs(vector, n_steps, ppo.gamma, rng_seed, scale_rewards)
    except ValueError:
        vector.close()
        raise
    learner = make_learner((envs.obs_dim, envs.codec.head_sizes), hidden, ppo.learning_rate, rng_seed)
    learner.sample_generator.manual_seed(rng_seed)
    learner.update_generator.manual_seed(rng_seed + 1)
    return GymRun(envs, learner, ppo)


def run_round(run: GymRun) -> dict[str, float]:
    """One round: `n_steps` of every env, then the PPO update; the round's metrics."""
    rollout = collect(run.learner, run.envs, run.ppo)
    done = update(run.learner, rollout, run.ppo)
    row = common_metrics(run.learner, done, run.envs.codec.head_names)
    row.update(run.envs.round_metrics())
    return row


# --------------------------------------------------------------------------- entry point
@dataclass
class GymResult:
    env_id: str
    episode_returns: list[float]
    """Undiscounted return of every completed episode, in completion order."""
    final_mean_return: float
    """Mean return of the last `FINAL_WINDOW` (20) completed episodes, or of all of them when
    fewer completed; NaN when none did."""
    rounds: list[dict[str, float]]
    """Per-round metrics: the loop's (CleanRL's names, `charts/SPS`, `global_step`) plus
    `charts/episodic_return` (mean over the episodes completed in that round, NaN when none) and
    `charts/recent_return` (the `final_mean_return` rule applied to every episode so far)."""
    global_step: int
    ppo: PPOConfig


def final_mean(returns: list[float], window: int = FINAL_WINDOW) -> float:
    tail = returns[-window:]
    return float(np.mean(tail)) if tail else math.nan


def train_gym(
    env_id: str,
    total_steps: int,
    n_envs: int = 8,
    n_steps: int = 128,
    ppo: PPOConfig | None = None,
    rng_seed: int = 0,
    hidden: int = 64,
    on_round: Callable[[dict[str, float]], None] | None = None,
    make_env: Callable[[], gymnasium.Env] | None = None,
    scale_rewards: bool = True,
) -> GymResult:
    """Train a recurrent PPO policy on `env_id` for at least `total_steps` env steps (whole rounds
    of `n_envs * n_steps`). `ppo` defaults to `default_ppo` over the run's rounds. Deterministic
    given `rng_seed`. `make_env` builds one env instead of the registry's `env_id` (tests)."""
    if min(total_steps, n_envs, n_steps) < 1:
        raise ValueError(f"total_steps, n_envs and n_steps must be >= 1, got {total_steps}, {n_envs}, {n_steps}")
    total_rounds = math.ceil(total_steps / (n_envs * n_steps))
    ppo = ppo or default_ppo(total_rounds)
    run = make_run(env_id, n_envs, n_steps, ppo, rng_seed, hidden, make_env, scale_rewards)
    rounds: list[dict[str, float]] = []
    try:
        for _ in range(total_rounds):
            row = run_round(run)
            rounds.append(row)
            if on_round is not None:
                on_round(row)
    finally:
        run.envs.envs.close()
    returns = run.envs.episode_returns
    return GymResult(env_id, returns, final_mean(returns), rounds, run.learner.global_step, ppo)
