"""PPO over vectorized morphogenetic environments: small phases around explicit state.

One round collects one episode from each of `n_envs` envs in lockstep, then updates the policy:

    start_round -> for each epoch: policy_inputs -> act -> train_epoch -> reward_and_store
                -> finish_round (GAE, PPO update, metrics)

- policy_inputs: each env's signals become the fixed-size observation; the running normalizer is
  updated with the raw batch, and the normalized batch is what the policy sees and the buffer
  stores.
- act: one batched policy forward for every env still in its episode; the op is sampled first,
  then the other heads under the masks for that op.
- train_epoch: every env executes its decision, then one shared data iteration feeds each batch
  to every env before the next is drawn (batch-first), then every env validates (with its
  counterfactuals), lets its governor judge and ticks its lifecycles.
- reward_and_store: the reward of (state, action, next state), and one buffer step per env.

Episode ends: the time limit is a true terminal. The episode is a whole host training run, the
epoch fraction is in the observation, and nothing follows the last epoch, so the return does not
bootstrap past it. A governor panic rolls the env back and ends its episode, also as a terminal,
with a penalty that stays in its own segment of the buffer; other envs go on untouched.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from esper.leyline import Decision, LifecycleOp, TrainingSignals
from esper.simic.buffer import RolloutBuffer, RolloutStep
from esper.simic.distributed import SINGLE_PROCESS, DistContext, merge_observations
from esper.simic.normalizer import RunningMeanStd
from esper.simic.ppo import PPOConfig, UpdateStats, ppo_update
from esper.simic.rewards import RewardBreakdown, RewardConfig, RewardFunction
from esper.tamiyo import HEADS, PolicySpaces, RecurrentPolicy
from esper.tamiyo.distributions import FactoredMasks, FactoredSample
from esper.tamiyo.policy import LSTMState
from esper.tolaria.datasets import TaskData
from esper.tolaria.environment import EnvConfig, MorphogeneticEnv, StepResult
from esper.tolaria.rng import seeded_init


@dataclass(frozen=True)
class TrainerConfig:
    """Everything that decides what a PPO run learns (saved in every checkpoint)."""

    episodes: int
    """Total episodes of the run, counting those done before a resume."""
    n_envs: int
    rng_seed: int = 0
    hidden: int = 128
    reward: RewardConfig = field(default_factory=RewardConfig)
    ppo: PPOConfig = field(default_factory=lambda: PPOConfig(gamma=1.0))
    """gamma 1: an episode is one finite host training run with time in the observation, so
    the undiscounted return is the objective itself (`esper.simic.rewards`)."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.n_envs < 1:
            raise ValueError(f"n_envs must be >= 1, got {self.n_envs}")
        RewardFunction(self.reward, self.ppo.gamma)  # a gamma mismatch is a ValueError here

    @property
    def total_rounds(self) -> int:
        return math.ceil(self.episodes / self.n_envs)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Learner:
    """The state that persists across rounds, and everything a checkpoint must hold."""

    policy: RecurrentPolicy
    optimizer: torch.optim.Optimizer
    obs_norm: RunningMeanStd
    sample_generator: torch.Generator
    """Action sampling (on the policy's device)."""
    update_generator: torch.Generator
    """Minibatch shuffling (CPU)."""
    data_generator: torch.Generator
    """The shared data order of every env (CPU)."""
    round: int = 0
    episodes_done: int = 0
    global_step: int = 0


@dataclass
class Setup:
    """What the run is made of: envs, their shared data, the observation and action spaces."""

    config: TrainerConfig
    envs: list[MorphogeneticEnv]
    data: TaskData
    """The data the shared batches are drawn from (on the first env's device)."""
    spaces: PolicySpaces
    reward: RewardFunction
    policy_device: torch.device
    episode_rng_seed: Callable[[int], int] = lambda episode: episode
    ctx: DistContext = SINGLE_PROCESS
    """This process's rank under `torchrun`: its envs run distinct episodes."""

    @property
    def batch_size(self) -> int:
        return self.envs[0].config.task.batch_size

    @property
    def max_epochs(self) -> int:
        return self.envs[0].config.max_epochs


@dataclass
class RoundState:
    """One round in flight: which envs still run, their signals, LSTM state and the buffer."""

    envs: list[MorphogeneticEnv]
    episodes: list[int]
    signals: list[TrainingSignals]
    running: list[bool]
    lstm: LSTMState
    episode_start: torch.Tensor
    buffer: RolloutBuffer
    returns: list[float]
    raw_obs: list[torch.Tensor] = field(default_factory=list)
    """Every raw observation acted on, for the normalizer's update after the round."""
    reward_parts: list[RewardBreakdown] = field(default_factory=list)
    ops: list[int] = field(default_factory=list)
    panics: int = 0
    started: float = field(default_factory=time.perf_counter)

    def running_ids(self) -> list[int]:
        return [i for i, r in enumerate(self.running) if r]


def assign_devices(n_envs: int, devices: Sequence[torch.device]) -> list[torch.device]:
    """Env i runs on devices[i % len(devices)] (round-robin)."""
    if not devices:
        raise ValueError("at least one device is needed")
    return [devices[i % len(devices)] for i in range(n_envs)]


def build_envs(
    env_config: EnvConfig, data: TaskData, devices: Sequence[torch.device], n_envs: int, emit=None
) -> list[MorphogeneticEnv]:
    """`n_envs` envs spread round-robin over `devices`; each ends its episode at a governor panic."""
    config = dataclasses.replace(env_config, end_episode_on_panic=True)
    return [
        MorphogeneticEnv(dataclasses.replace(config, device=device), data, emit)
        for device in assign_devices(n_envs, devices)
    ]


def build_trainer(
    config: TrainerConfig,
    env_config: EnvConfig,
    data: TaskData,
    devices: Sequence[torch.device],
    policy_device: torch.device,
    blueprints: tuple[str, ...] | None = None,
    ctx: DistContext = SINGLE_PROCESS,
    emit=None,
) -> tuple[Setup, Learner]:
    """A fresh run: this rank's envs over `devices`, the spaces derived from the task's host, and
    a learner. Episode `e` trains with RNG seed `config.rng_seed + e` on whichever rank runs it."""
    task = env_config.task
    spaces = PolicySpaces.derive(task.topology, task.slot_names, blueprints)
    envs = build_envs(env_config, data, devices, config.n_envs, emit)
    setup = Setup(
        config=config,
        envs=envs,
        data=envs[0].passes.data,
        spaces=spaces,
        reward=RewardFunction(config.reward, config.ppo.gamma),
        policy_device=policy_device,
        episode_rng_seed=lambda episode: config.rng_seed + episode,
        ctx=ctx,
    )
    return setup, make_learner(config, spaces, policy_device, ctx)


RANK_SEED_STRIDE = 1_000_003
"""Each rank's generators start `rank * stride` after rank 0's, so ranks draw distinct streams."""


def make_learner(
    config: TrainerConfig,
    spaces: PolicySpaces,
    device: torch.device,
    ctx: DistContext = SINGLE_PROCESS,
) -> Learner:
    """The policy is initialised from the run's RNG seed on every rank (and rank 0's weights are
    broadcast, so ranks agree even if initialisation ever drew from elsewhere); the sampling,
    shuffling and data generators differ per rank."""
    with seeded_init(config.rng_seed):
        policy = RecurrentPolicy(spaces.layout.obs_dim, spaces.actions.head_sizes, config.hidden, config.hidden).to(
            device
        )
    ctx.broadcast_module(policy)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.ppo.learning_rate, eps=1e-5)
    base = config.rng_seed + RANK_SEED_STRIDE * ctx.rank
    return Learner(
        policy=policy,
        optimizer=optimizer,
        obs_norm=RunningMeanStd(spaces.layout.obs_dim),
        sample_generator=torch.Generator(device=device).manual_seed(base),
        update_generator=torch.Generator().manual_seed(base + 1),
        data_generator=torch.Generator().manual_seed(base + 2),
    )


# --------------------------------------------------------------------------- phases
def start_round(setup: Setup, learner: Learner, n_envs: int) -> RoundState:
    """Reset the first `n_envs` envs on the next episode indices (rank r takes the r-th block)."""
    envs = setup.envs[:n_envs]
    episodes = [learner.episodes_done + setup.ctx.rank * n_envs + i for i in range(n_envs)]
    signals = [env.reset(setup.episode_rng_seed(ep), ep) for env, ep in zip(envs, episodes, strict=True)]
    state = learner.policy.initial_state(n_envs, setup.policy_device)
    buffer = RolloutBuffer(
        setup.max_epochs,
        n_envs,
        setup.spaces.layout.obs_dim,
        setup.spaces.actions.head_sizes,
        state,
        setup.policy_device,
    )
    return RoundState(
        envs=envs,
        episodes=episodes,
        signals=signals,
        running=[True] * n_envs,
        lstm=state,
        episode_start=torch.ones(n_envs, dtype=torch.bool, device=setup.policy_device),
        buffer=buffer,
        returns=[0.0] * n_envs,
    )


def policy_inputs(setup: Setup, learner: Learner, rs: RoundState, ids: list[int]) -> torch.Tensor:
    """The normalized observations of envs `ids`, (K, obs_dim) on the policy's device."""
    raw = torch.stack([setup.spaces.layout.featurize(rs.signals[i]) for i in ids])
    rs.raw_obs.append(raw)
    return learner.obs_norm.normalize(raw).to(setup.policy_device)


def action_masks(setup: Setup, rs: RoundState, ids: list[int]) -> FactoredMasks:
    firsts, conditionals = [], []
    for i in ids:
        first, conditional = setup.spaces.actions.conditional_masks(rs.signals[i], rs.envs[i].config.thresholds)
        firsts.append(first)
        conditionals.append(conditional)
    device = setup.policy_device
    return FactoredMasks(
        first=torch.stack(firsts).to(device),
        conditional=tuple(torch.stack(heads).to(device) for heads in zip(*conditionals, strict=True)),
        head_active=setup.spaces.actions.head_active_table().to(device),
    )


@torch.no_grad()
def act(
    setup: Setup, learner: Learner, rs: RoundState, ids: list[int], obs: torch.Tensor
) -> tuple[FactoredSample, torch.Tensor, list[Decision]]:
    """One batched forward for envs `ids`: their sampled actions, values and decisions."""
    index = torch.tensor(ids, device=setup.policy_device)
    h, c = rs.lstm
    learner.policy.eval()
    uniforms = torch.rand(
        len(rs.envs),
        len(setup.spaces.actions.head_sizes),
        generator=learner.sample_generator,
        device=learner.sample_generator.device,
    )
    step = learner.policy.act(
        obs, (h[:, index], c[:, index]), rs.episode_start[index], action_masks(setup, rs, ids), uniforms[index]
    )
    h[:, index], c[:, index] = step.state
    decisions = [setup.spaces.actions.decode(*row) for row in step.sample.actions.tolist()]
    return step.sample, step.values, decisions


def train_epoch(setup: Setup, learner: Learner, rs: RoundState, ids: list[int], decisions: list[Decision]):
    """Every env in `ids` executes its decision and trains one epoch on the same shared batches."""
    envs = [rs.envs[i] for i in ids]
    for env, decision in zip(envs, decisions, strict=True):
        env.begin_step(decision)
    try:
        for x, y in setup.data.train_batches(setup.batch_size, learner.data_generator):
            for env in envs:
                env.train_batch(x, y)  # each env moves the batch to its device, on its own stream
    except BaseException:
        for env in envs:
            env.abort_step()
        raise
    return [env.end_step() for env in envs]


def reward_and_store(
    setup: Setup,
    rs: RoundState,
    ids: list[int],
    obs: torch.Tensor,
    sample: FactoredSample,
    values: torch.Tensor,
    decisions: list[Decision],
    results: list[StepResult],
) -> None:
    """Reward each env's (state, action, next state) and append one step to its segment."""
    rewards, terminated = [], []
    for i, decision, result in zip(ids, decisions, results, strict=True):
        panic = result.panic is not None
        parts = setup.reward(rs.signals[i], result.signals, terminal=result.done, panic=panic)
        rewards.append(parts.total)
        terminated.append(result.done)
        rs.returns[i] += parts.total
        rs.reward_parts.append(parts)
        rs.ops.append(int(decision.op))
        rs.panics += panic
        rs.signals[i] = result.signals
        rs.running[i] = not result.done
    index = torch.tensor(ids)
    device = setup.policy_device
    rs.buffer.add(
        RolloutStep.of(
            envs=index,
            obs=obs,
            episode_start=rs.episode_start[index.to(device)],
            sample=sample,
            values=values,
            rewards=torch.tensor(rewards),
            terminated=torch.tensor(terminated),
            truncated=torch.zeros(len(ids), dtype=torch.bool),
        )
    )
    rs.episode_start[index.to(device)] = False


def finish_round(setup: Setup, learner: Learner, rs: RoundState) -> dict[str, float]:
    """GAE (every episode ended as a terminal, so nothing bootstraps), the PPO update, metrics.

    Each env's test accuracy is measured here, after its episode and outside anything the policy
    sees or is rewarded for: it is reported, never learned from."""
    test_accuracy = [env.evaluate_test().accuracy for env in rs.envs]
    ppo = setup.config.ppo
    lr, ent_coef = ppo.schedule(learner.round)
    for group in learner.optimizer.param_groups:
        group["lr"] = lr
    ctx = setup.ctx
    rs.buffer.compute_returns(torch.zeros(len(rs.envs)), ppo.gamma, ppo.gae_lambda)
    stats = ppo_update(learner.policy, learner.optimizer, rs.buffer, ppo, ent_coef, learner.update_generator, ctx)
    merge_observations(ctx, learner.obs_norm, torch.cat(rs.raw_obs))
    steps = int(rs.buffer.valid.sum())
    learner.round += 1
    learner.episodes_done += len(rs.envs) * ctx.world_size
    learner.global_step += int(ctx.all_reduce_sum(torch.tensor(float(steps))))
    seconds = time.perf_counter() - rs.started
    row = round_metrics(learner, rs, stats, steps, seconds, lr, ent_coef)
    row["charts/final_test_accuracy"] = sum(test_accuracy) / len(test_accuracy)
    row = reduce_metrics(ctx, row)
    return row


SUMMED_METRICS: tuple[str, ...] = ("charts/panics", "charts/SPS")
"""Metrics added over ranks; the others are averaged (counters are already global)."""
GLOBAL_METRICS: tuple[str, ...] = ("round", "episodes", "global_step")


def reduce_metrics(ctx: DistContext, row: dict[str, float]) -> dict[str, float]:
    """The round's metrics over every rank (one all-reduce; the same on every rank)."""
    if not ctx.enabled:
        return row
    keys = [k for k in row if k not in GLOBAL_METRICS]
    total = ctx.all_reduce_sum(torch.tensor([row[k] for k in keys], dtype=torch.float64, device=ctx.device)).cpu()
    reduced = dict(row)
    for key, value in zip(keys, total.tolist(), strict=True):
        reduced[key] = value if key in SUMMED_METRICS else value / ctx.world_size
    return reduced


def round_metrics(
    learner: Learner, rs: RoundState, stats: UpdateStats, steps: int, seconds: float, lr: float, ent_coef: float
) -> dict[str, float]:
    n = len(rs.envs)
    final = rs.signals
    row: dict[str, float] = {
        "round": learner.round,
        "episodes": learner.episodes_done,
        "global_step": learner.global_step,
        "charts/episodic_return": sum(rs.returns) / n,
        "charts/episodic_length": steps / n,
        "charts/final_val_accuracy": sum(s.val_accuracy for s in final) / n,
        "charts/seed_param_share": sum(s.seed_param_share for s in final) / n,
        "charts/seeds_germinated": sum(s.seeds_germinated for s in final) / n,
        "charts/fossilized_seeds": sum(sum(r.final_stage == "FOSSILIZED" for r in env.seeds.records) for env in rs.envs)
        / n,
        "charts/panics": float(rs.panics),
        "charts/learning_rate": lr,
        "charts/ent_coef": ent_coef,
    }
    for op in LifecycleOp:
        row[f"charts/op_{op.name.lower()}"] = sum(o == int(op) for o in rs.ops) / max(len(rs.ops), 1)
    for part in dataclasses.fields(RewardBreakdown):
        row[f"rewards/{part.name}"] = sum(getattr(p, part.name) for p in rs.reward_parts) / n
    row.update(stats.metrics(HEADS))
    row["charts/SPS"] = steps / seconds
    row["time/round_seconds"] = seconds
    return row


TIMING_METRICS: tuple[str, ...] = ("charts/SPS", "time/round_seconds")
"""Wall-clock metrics: the only ones that differ between a run and its exact resume."""


def run_round(setup: Setup, learner: Learner, on_epoch: Callable[[int], None] | None = None) -> dict[str, float]:
    """Collect one episode per env (fewer in a last, partial round), then update the policy.

    Under `torchrun` every rank runs the same number of envs (so that their updates run the same
    collectives); a last partial round may then run up to `world_size - 1` episodes more than
    asked."""
    remaining = setup.config.episodes - learner.episodes_done
    n_envs = min(setup.config.n_envs, math.ceil(remaining / setup.ctx.world_size))
    rs = start_round(setup, learner, n_envs)
    while ids := rs.running_ids():
        obs = policy_inputs(setup, learner, rs, ids)
        sample, values, decisions = act(setup, learner, rs, ids, obs)
        results = train_epoch(setup, learner, rs, ids, decisions)
        reward_and_store(setup, rs, ids, obs, sample, values, decisions, results)
        if on_epoch is not None:
            on_epoch(len(ids))
    return finish_round(setup, learner, rs)
