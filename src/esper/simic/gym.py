"""The project's own PPO core trained on any Gymnasium env with a discrete or multi-discrete action.

Why: the morphogenetic envs have no known optimum, so a learning failure there could be the
task or the learner. Standard control tasks with known solved returns (CartPole-v1: 500) test
the PPO core alone: the same `RecurrentPolicy`, `sample_factored`, `RolloutBuffer`, GAE and
`ppo_update` the morphogenetic trainer uses, with no host or seed knowledge here.

One round collects `n_steps` steps from each of `n_envs` envs, then updates the policy:

    make_run -> repeat: collect (rollout segment + GAE) -> update (PPO, metrics)

Episode ends inside a segment follow Gymnasium's two kinds:
- termination: a true terminal, the return bootstraps 0;
- truncation (a time limit): the return bootstraps from V(final observation), computed from the
  LSTM state after the step that reached it. The vector env runs in SAME_STEP autoreset mode, so
  the final observation arrives in `info["final_obs"]` on the very step that ended the episode,
  while the returned observation is already the next episode's first.
The step after any episode end is marked `episode_start`, where the policy zeroes its LSTM state.
Segments do not reset anything: each round starts from the LSTM state and observation where the
previous round stopped (the buffer stores that initial state), and a segment that stops
mid-episode bootstraps from V of the current observation.

Inputs are scaled as the agent sees them, never as they are reported: observations by running
mean and variance (`RunningMeanStd`), rewards by the running spread of the discounted return
(`RewardScaler`). `GymResult.episode_returns` are the env's own, unscaled returns.
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

from esper.simic.buffer import RolloutBuffer, RolloutStep
from esper.simic.normalizer import RunningMeanStd
from esper.simic.ppo import PPOConfig, ppo_update
from esper.tamiyo.distributions import FactoredMasks
from esper.tamiyo.policy import LSTMState, RecurrentPolicy
from esper.tolaria.rng import seeded_init

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

    Both schedules span the whole run: the learning rate decays to 0 at the last round, which
    settles the policy at the end, and the entropy bonus stays constant. No KL early stop: with
    4 epochs of 4 minibatches the clip alone keeps updates small on these tasks.
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
        ent_coef_final=0.01,
        max_grad_norm=0.5,
        target_kl=None,
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


# --------------------------------------------------------------------------- run state
@dataclass
class GymRun:
    """Everything that persists across rounds."""

    envs: gymnasium.vector.VectorEnv
    codec: ActionCodec
    obs_dim: int
    policy: RecurrentPolicy
    optimizer: torch.optim.Optimizer
    ppo: PPOConfig
    obs_norm: RunningMeanStd | None
    reward_scale: RewardScaler | None
    sample_generator: torch.Generator
    update_generator: torch.Generator
    raw_obs: np.ndarray
    """(N, ...) the observation each env stands at, not yet acted on."""
    lstm: LSTMState
    """The LSTM state after the last step each env took; the policy zeroes it itself where
    `episode_start` is set."""
    episode_start: torch.Tensor
    """(N,) bool: the next step is the first of an episode."""
    running_return: np.ndarray
    running_length: np.ndarray
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    round: int = 0
    global_step: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def n_envs(self) -> int:
        return self.envs.num_envs


def make_run(
    env_id: str,
    n_envs: int,
    ppo: PPOConfig,
    seed: int = 0,
    hidden: int = 64,
    normalize_obs: bool = True,
    make_env: Callable[[], gymnasium.Env] | None = None,
    scale_rewards: bool = True,
) -> GymRun:
    """Build the envs (reset with `seed`), a policy initialised from `seed`, and the optimizer."""
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    envs = make_vector_env(env_id, n_envs, make_env)
    try:
        codec = ActionCodec.for_space(envs.single_action_space)
        obs_dim = observation_dim(envs.single_observation_space)
    except ValueError:
        envs.close()
        raise
    with seeded_init(seed):
        policy = RecurrentPolicy(obs_dim, codec.head_sizes, hidden, hidden)
    raw_obs, _ = envs.reset(seed=seed)
    return GymRun(
        envs=envs,
        codec=codec,
        obs_dim=obs_dim,
        policy=policy,
        optimizer=torch.optim.Adam(policy.parameters(), lr=ppo.learning_rate, eps=1e-5),
        ppo=ppo,
        obs_norm=RunningMeanStd(obs_dim) if normalize_obs else None,
        reward_scale=RewardScaler(n_envs, ppo.gamma) if scale_rewards else None,
        sample_generator=torch.Generator().manual_seed(seed),
        update_generator=torch.Generator().manual_seed(seed + 1),
        raw_obs=raw_obs,
        lstm=policy.initial_state(n_envs),
        episode_start=torch.ones(n_envs, dtype=torch.bool),
        running_return=np.zeros(n_envs),
        running_length=np.zeros(n_envs, dtype=np.int64),
    )


# --------------------------------------------------------------------------- rollout
def as_tensor(raw: np.ndarray) -> torch.Tensor:
    """(N, ...) observations -> (N, obs_dim) float32."""
    return torch.as_tensor(np.asarray(raw, dtype=np.float32)).reshape(raw.shape[0], -1)


def normalized_observation(run: GymRun, raw: np.ndarray) -> torch.Tensor:
    """What the policy acts on: the statistics learn from the raw batch first, then normalize it.
    Called once per batch the policy acts on, so no observation is counted twice."""
    obs = as_tensor(raw)
    if run.obs_norm is None:
        return obs
    run.obs_norm.update(obs)
    return run.obs_norm.normalize(obs)


def normalized_only(run: GymRun, raw: np.ndarray) -> torch.Tensor:
    """A final observation is never acted on, so it is normalized without updating the statistics."""
    obs = as_tensor(raw)
    return obs if run.obs_norm is None else run.obs_norm.normalize(obs)


def final_observations(info: dict, ids: np.ndarray) -> np.ndarray:
    """(K, ...) final observations of envs `ids` from a SAME_STEP step's info."""
    return np.stack([np.asarray(info["final_obs"][i], dtype=np.float32) for i in ids])


@torch.no_grad()
def bootstrap_values(run: GymRun, info: dict, truncated: np.ndarray, state: LSTMState) -> torch.Tensor:
    """(N,) V(final observation) for truncated envs, 0 elsewhere. Each final observation
    continues its episode, so V reads it from `state`, the LSTM state after the step just taken."""
    out = torch.zeros(run.n_envs)
    ids = np.flatnonzero(truncated)
    if ids.size == 0:
        return out
    index = torch.as_tensor(ids)
    obs = normalized_only(run, final_observations(info, ids))
    h, c = state
    _, values, _ = run.policy(obs.unsqueeze(0), (h[:, index], c[:, index]), torch.zeros(1, ids.size, dtype=torch.bool))
    out[index] = values[0]
    return out


def record_episodes(run: GymRun, rewards: np.ndarray, ended: np.ndarray) -> None:
    """Running returns and lengths; an ended episode's are appended in completion order."""
    run.running_return += rewards
    run.running_length += 1
    for i in np.flatnonzero(ended):
        run.episode_returns.append(float(run.running_return[i]))
        run.episode_lengths.append(int(run.running_length[i]))
    run.running_return[ended] = 0.0
    run.running_length[ended] = 0


@torch.no_grad()
def collect_step(run: GymRun, buffer: RolloutBuffer, masks: FactoredMasks) -> None:
    """One step of every env: act, step the vector env, bootstrap truncations, store."""
    obs = normalized_observation(run, run.raw_obs)
    step = run.policy.act(obs, run.lstm, run.episode_start, masks, generator=run.sample_generator)
    sample, state = step.sample, step.state
    raw_next, rewards, terminated, truncated, info = run.envs.step(run.codec.decode(sample.actions))
    rewards = np.asarray(rewards, dtype=np.float64)
    terminated = np.asarray(terminated, dtype=bool)
    truncated = np.asarray(truncated, dtype=bool) & ~terminated  # both set: the terminal wins
    ended = terminated | truncated
    learned = rewards if run.reward_scale is None else run.reward_scale(rewards, ended)
    buffer.add(
        RolloutStep.of(
            envs=torch.arange(run.n_envs),
            obs=obs,
            episode_start=run.episode_start,
            sample=sample,
            values=step.values,
            rewards=torch.as_tensor(learned, dtype=torch.float32),
            terminated=torch.as_tensor(terminated),
            truncated=torch.as_tensor(truncated),
            bootstrap_values=bootstrap_values(run, info, truncated, state),
        )
    )
    record_episodes(run, rewards, ended)
    run.raw_obs, run.lstm = raw_next, state
    run.episode_start = torch.as_tensor(ended)
    run.global_step += run.n_envs


@torch.no_grad()
def segment_end_values(run: GymRun) -> torch.Tensor:
    """(N,) V of the observation each env stands at, for segments cut mid-episode.

    The next round acts on this same observation again from the carried state: this forward
    only reads a value and changes nothing (the statistics are not updated for it either)."""
    obs = normalized_only(run, run.raw_obs)
    _, values, _ = run.policy(obs.unsqueeze(0), run.lstm, run.episode_start.unsqueeze(0))
    return values[0]


def collect(run: GymRun, n_steps: int) -> RolloutBuffer:
    """One rollout segment of `n_steps` per env, from the carried state, with returns computed."""
    run.policy.eval()
    buffer = RolloutBuffer(n_steps, run.n_envs, run.obs_dim, run.codec.head_sizes, run.lstm)
    masks = FactoredMasks.unmasked(run.n_envs, run.codec.head_sizes)
    for _ in range(n_steps):
        collect_step(run, buffer, masks)
    buffer.compute_returns(segment_end_values(run), run.ppo.gamma, run.ppo.gae_lambda)
    return buffer


# --------------------------------------------------------------------------- update
def update(run: GymRun, buffer: RolloutBuffer, episodes_before: int) -> dict[str, float]:
    """The PPO update on `buffer` under this round's schedule, and the round's metrics."""
    lr, ent_coef = run.ppo.schedule(run.round)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    stats = ppo_update(run.policy, run.optimizer, buffer, run.ppo, ent_coef, run.update_generator)
    run.round += 1
    new_returns = run.episode_returns[episodes_before:]
    new_lengths = run.episode_lengths[episodes_before:]
    row: dict[str, float] = {
        "round": run.round,
        "global_step": run.global_step,
        "charts/episodic_return": float(np.mean(new_returns)) if new_returns else math.nan,
        "charts/episodic_length": float(np.mean(new_lengths)) if new_lengths else math.nan,
        "charts/episodes": float(len(new_returns)),
        "charts/recent_return": final_mean(run.episode_returns),
        "charts/learning_rate": lr,
        "charts/ent_coef": ent_coef,
    }
    row.update(stats.metrics(run.codec.head_names))
    row["charts/SPS"] = run.global_step / max(time.perf_counter() - run.started, 1e-9)
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
    """Per-round metrics: `UpdateStats.metrics` plus `charts/episodic_return` (mean over the
    episodes completed in that round, NaN when none), `charts/recent_return` (the
    `final_mean_return` rule applied to every episode so far), `charts/SPS` (steps per second
    since the start), `global_step`."""
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
    seed: int = 0,
    hidden: int = 64,
    normalize_obs: bool = True,
    on_round: Callable[[dict[str, float]], None] | None = None,
    make_env: Callable[[], gymnasium.Env] | None = None,
    scale_rewards: bool = True,
) -> GymResult:
    """Train a recurrent PPO policy on `env_id` for at least `total_steps` env steps (whole rounds
    of `n_envs * n_steps`). `ppo` defaults to `default_ppo` over the run's rounds. Deterministic
    given `seed`. `make_env` builds one env instead of the registry's `env_id` (tests)."""
    if min(total_steps, n_envs, n_steps) < 1:
        raise ValueError(f"total_steps, n_envs and n_steps must be >= 1, got {total_steps}, {n_envs}, {n_steps}")
    total_rounds = math.ceil(total_steps / (n_envs * n_steps))
    ppo = ppo or default_ppo(total_rounds)
    run = make_run(env_id, n_envs, ppo, seed, hidden, normalize_obs, make_env, scale_rewards)
    rounds: list[dict[str, float]] = []
    try:
        for _ in range(total_rounds):
            episodes_before = len(run.episode_returns)
            buffer = collect(run, n_steps)
            row = update(run, buffer, episodes_before)
            rounds.append(row)
            if on_round is not None:
                on_round(row)
    finally:
        run.envs.close()
    return GymResult(env_id, run.episode_returns, final_mean(run.episode_returns), rounds, run.global_step, ppo)
