"""The one PPO loop: collect a round of experience from N envs, then update the policy.

    begin_round -> while envs act: observe -> act -> step -> store -> GAE -> update -> metrics

Any vectorized envs plug in through `RolloutEnvs`: the morphogenetic envs
(`esper.simic.morphogenetic_envs`, one whole episode per env and round, stepped in lockstep on
shared batches) and Gymnasium vector envs (`esper.simic.gymnasium_envs`, a fixed number of steps
per round, episodes running across rounds). What the loop owns is the same for both:

- the policy acts on the normalized observation, and the buffer stores exactly that. The
  observation statistics are frozen within a round and absorb the round's raw observations after
  its update (merged over ranks under `torchrun`), so an env's observations never depend on what
  its neighbours saw in the same round;
- actions are drawn from per-env uniforms (one row of a (N, heads) draw per step), so which envs
  act alongside an env never changes its actions;
- the LSTM state and episode starts carry from step to step and round to round; a truncated
  episode bootstraps from V(final observation) read with the state after its last step, and a
  segment cut mid-episode from V of where the env stands;
- the update: the round's learning rate and entropy coefficient, `ppo_update`, counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from esper.simic.buffer import RolloutBuffer, RolloutStep
from esper.simic.distributed import SINGLE_PROCESS, DistContext, merge_observations
from esper.simic.normalizer import RunningMeanStd
from esper.simic.update import PPOConfig, UpdateStats, ppo_update
from esper.tamiyo import FactoredMasks, FactoredSample, PolicySpaces, RecurrentPolicy
from esper.tamiyo.policy import LSTMState
from esper.tolaria.rng import seeded_init


@dataclass(frozen=True)
class EnvStep:
    """What K envs did with their actions."""

    rewards: torch.Tensor
    """(K,) the rewards the policy learns from."""
    terminated: torch.Tensor
    """(K,) bool: a true terminal; nothing follows."""
    truncated: torch.Tensor
    """(K,) bool: cut by a time limit; the return bootstraps from V(final observation)."""
    final_obs: torch.Tensor | None = None
    """(K, obs_dim) raw final observations (rows of truncated envs); None when none truncated."""


class RolloutEnvs(Protocol):
    """N envs the loop drives. Observations are raw (the loop normalizes them)."""

    n_envs: int
    max_round_steps: int
    """The most steps one env takes in a round (the buffer's length)."""

    def begin_round(self) -> torch.Tensor:
        """Start a round; (N,) bool: the envs whose next step starts a new episode."""
        ...

    def acting(self) -> list[int]:
        """The envs that act now; none ends the round."""
        ...

    def observe(self, ids: list[int]) -> torch.Tensor: ...

    def masks(self, ids: list[int]) -> FactoredMasks: ...

    def step(self, ids: list[int], sample: FactoredSample) -> EnvStep:
        """Execute `sample.actions` (K, H); the rest of the sample (how likely each choice was)
        is there for an env's diagnostics."""


@dataclass
class Learner:
    """The state that persists across rounds, and everything a checkpoint must hold (the LSTM
    state aside: morphogenetic rounds start new episodes, and Gymnasium runs do not resume)."""

    policy: RecurrentPolicy
    optimizer: torch.optim.Optimizer
    obs_norm: RunningMeanStd
    sample_generator: torch.Generator
    """Action sampling (on the policy's device)."""
    update_generator: torch.Generator
    """Minibatch shuffling (CPU)."""
    data_generator: torch.Generator
    """The shared data order of morphogenetic envs (CPU)."""
    round: int = 0
    episodes_done: int = 0
    global_step: int = 0
    lstm: LSTMState | None = None
    episode_start: torch.Tensor | None = None

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device


RANK_SEED_STRIDE = 1_000_003
"""Each rank's generators start `rank * stride` after rank 0's, so ranks draw distinct streams."""


def make_learner(
    spaces: PolicySpaces | tuple[int, tuple[int, ...]],
    hidden: int,
    learning_rate: float,
    rng_seed: int,
    device: torch.device = torch.device("cpu"),  # noqa: B008
    ctx: DistContext = SINGLE_PROCESS,
) -> Learner:
    """A policy initialised from `rng_seed` (the same on every rank, and rank 0's weights
    broadcast so ranks agree even if initialisation ever drew from elsewhere), its Adam, an
    observation normalizer, and the sampling, shuffling and data generators of this rank.
    `spaces` is a policy's spaces, or (obs_dim, head_sizes)."""
    obs_dim, head_sizes = (
        (spaces.layout.obs_dim, spaces.actions.head_sizes) if isinstance(spaces, PolicySpaces) else spaces
    )
    with seeded_init(rng_seed):
        policy = RecurrentPolicy(obs_dim, head_sizes, hidden, hidden).to(device)
    ctx.broadcast_module(policy)
    base = rng_seed + RANK_SEED_STRIDE * ctx.rank
    return Learner(
        policy=policy,
        optimizer=torch.optim.Adam(policy.parameters(), lr=learning_rate, eps=1e-5),
        obs_norm=RunningMeanStd(obs_dim),
        sample_generator=torch.Generator(device=device).manual_seed(base),
        update_generator=torch.Generator().manual_seed(base + 1),
        data_generator=torch.Generator().manual_seed(base + 2),
    )


@dataclass
class Rollout:
    """One round's experience: the buffer and the raw observations acted on."""

    buffer: RolloutBuffer
    raw_obs: list[torch.Tensor] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    @property
    def steps(self) -> int:
        return int(self.buffer.valid.sum())


# --------------------------------------------------------------------------- collecting
def begin_rollout(learner: Learner, envs: RolloutEnvs) -> Rollout:
    """Start a round: new episodes get a zero LSTM state and an episode start."""
    starts = envs.begin_round().to(learner.device)
    if learner.lstm is None or learner.lstm[0].shape[1] != envs.n_envs:
        learner.lstm = learner.policy.initial_state(envs.n_envs, learner.device)
        learner.episode_start = torch.ones(envs.n_envs, dtype=torch.bool, device=learner.device)
    assert learner.episode_start is not None
    h, c = learner.lstm
    keep = (~starts).to(h.dtype).view(1, -1, 1)
    learner.lstm = (h * keep, c * keep)
    learner.episode_start = learner.episode_start | starts
    heads = learner.policy.head_sizes
    obs_dim = learner.obs_norm.mean.numel()
    buffer = RolloutBuffer(envs.max_round_steps, envs.n_envs, obs_dim, heads, learner.lstm, learner.device)
    return Rollout(buffer)


def collect_step(learner: Learner, envs: RolloutEnvs, rollout: Rollout, ids: list[int]) -> None:
    """One step of envs `ids`: observe, act under their masks, step, store. (The policy runs
    without gradients; the envs' own training, between acting and storing, needs them.)"""
    assert learner.lstm is not None and learner.episode_start is not None
    raw = envs.observe(ids)
    rollout.raw_obs.append(raw)
    obs = learner.obs_norm.normalize(raw).to(learner.device)
    index = torch.tensor(ids, device=learner.device)
    h, c = learner.lstm
    uniforms = torch.rand(
        envs.n_envs, len(learner.policy.head_sizes), generator=learner.sample_generator, device=learner.device
    )
    learner.policy.eval()
    with torch.no_grad():
        step = learner.policy.act(
            obs, (h[:, index], c[:, index]), learner.episode_start[index], envs.masks(ids), uniforms[index]
        )
    outcome = envs.step(ids, step.sample)
    bootstrap = truncation_values(learner, outcome, step.state)
    rollout.buffer.add(
        RolloutStep.of(
            torch.tensor(ids),
            obs,
            learner.episode_start[index],
            step.sample,
            step.values,
            outcome.rewards,
            outcome.terminated,
            outcome.truncated,
            bootstrap,
        )
    )
    h[:, index], c[:, index] = step.state
    learner.episode_start[index] = (outcome.terminated | outcome.truncated).to(learner.device)


@torch.no_grad()
def truncation_values(learner: Learner, outcome: EnvStep, state: LSTMState) -> torch.Tensor | None:
    """(K,) V(final observation) of truncated envs, read with the state after their last step
    (each final observation continues its episode); 0 elsewhere. None when none truncated."""
    if outcome.final_obs is None or not bool(outcome.truncated.any()):
        return None
    rows = torch.nonzero(outcome.truncated).flatten()
    values = torch.zeros(outcome.truncated.shape[0])
    obs = learner.obs_norm.normalize(outcome.final_obs[rows]).to(learner.device)
    h, c = state
    index = rows.to(learner.device)
    no_start = torch.zeros(1, rows.numel(), dtype=torch.bool, device=learner.device)
    _, v, _ = learner.policy(obs.unsqueeze(0), (h[:, index], c[:, index]), no_start)
    values[rows] = v[0].cpu()
    return values


@torch.no_grad()
def segment_end_values(learner: Learner, envs: RolloutEnvs) -> torch.Tensor:
    """(N,) V of the observation each env stands at, for segments cut mid-episode (0 for envs
    whose episode just ended: their next step starts a new one). Reads a value and changes
    nothing: the next round acts on this same observation from the same state."""
    assert learner.lstm is not None and learner.episode_start is not None
    values = torch.zeros(envs.n_envs)
    ongoing = [i for i in range(envs.n_envs) if not bool(learner.episode_start[i])]
    if not ongoing:
        return values
    index = torch.tensor(ongoing, device=learner.device)
    obs = learner.obs_norm.normalize(envs.observe(ongoing)).to(learner.device)
    h, c = learner.lstm
    no_start = torch.zeros(1, len(ongoing), dtype=torch.bool, device=learner.device)
    _, v, _ = learner.policy(obs.unsqueeze(0), (h[:, index], c[:, index]), no_start)
    values[torch.tensor(ongoing)] = v[0].cpu()
    return values


def collect(
    learner: Learner, envs: RolloutEnvs, ppo: PPOConfig, on_step: Callable[[int], None] | None = None
) -> Rollout:
    """A round of experience from `envs`, with its returns computed."""
    rollout = begin_rollout(learner, envs)
    while ids := envs.acting():
        collect_step(learner, envs, rollout, ids)
        if on_step is not None:
            on_step(len(ids))
    rollout.buffer.compute_returns(segment_end_values(learner, envs), ppo.gamma, ppo.gae_lambda)
    return rollout


# --------------------------------------------------------------------------- updating
@dataclass(frozen=True)
class RoundUpdate:
    stats: UpdateStats
    learning_rate: float
    ent_coef: float
    steps: int
    seconds: float


def update(learner: Learner, rollout: Rollout, ppo: PPOConfig, ctx: DistContext = SINGLE_PROCESS) -> RoundUpdate:
    """The PPO update under the round's schedule; then the observation statistics absorb the
    round (merged over ranks) and the counters advance."""
    lr, ent_coef = ppo.schedule(learner.round)
    for group in learner.optimizer.param_groups:
        group["lr"] = lr
    stats = ppo_update(learner.policy, learner.optimizer, rollout.buffer, ppo, ent_coef, learner.update_generator, ctx)
    merge_observations(ctx, learner.obs_norm, torch.cat(rollout.raw_obs))
    learner.round += 1
    steps = rollout.steps
    learner.global_step += int(ctx.all_reduce_sum(torch.tensor(float(steps))))
    return RoundUpdate(stats, lr, ent_coef, steps, time.perf_counter() - rollout.started)


def common_metrics(learner: Learner, done: RoundUpdate, head_names: tuple[str, ...]) -> dict[str, float]:
    """What every PPO round reports, under CleanRL's names."""
    row: dict[str, float] = {
        "round": learner.round,
        "global_step": learner.global_step,
        "charts/learning_rate": done.learning_rate,
        "charts/ent_coef": done.ent_coef,
    }
    row.update(done.stats.metrics(head_names))
    row["charts/SPS"] = done.steps / done.seconds
    row["time/round_seconds"] = done.seconds
    return row
