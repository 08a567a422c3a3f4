"""Morphogenetic envs in the PPO loop: one whole episode per env and round, stepped in lockstep.

A round resets its envs on the next episode indices (rank r of a `torchrun` job takes the r-th
block, so ranks run distinct episodes and seeds). Each step, every env still in its episode
executes its decision; then one shared data iteration feeds each batch to every env before the
next is drawn; then every env validates (with its counterfactuals), lets its governor judge and
ticks its lifecycles. The reward is that of (state, next state) (`esper.simic.rewards`).

With the reward's `static_baseline`, a round's envs all train on one RNG seed (the first of the
episodes they run) beside one more env, the static twin: the same host on the same seed and the
same batches that only ever waits. Its accuracy change each epoch is the baseline every env's
reward subtracts. The twin costs one env's training per round and is never in the buffer.

Episode ends: the time limit is a true terminal. The episode is a whole host training run, the
epoch fraction is in the observation, and nothing follows the last epoch, so the return does not
bootstrap past it. A governor panic rolls the env back and ends its episode, also as a terminal,
with a penalty that stays in its own segment of the buffer; other envs go on untouched.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from esper.leyline import Decision, LifecycleOp, TrainingSignals
from esper.simic.distributed import SINGLE_PROCESS, DistContext
from esper.simic.loop import EnvStep, Learner, RoundUpdate, collect, common_metrics, make_learner, update
from esper.simic.rewards import RewardBreakdown, RewardConfig, RewardFunction
from esper.simic.update import PPOConfig
from esper.tamiyo import HEADS, FactoredMasks, FactoredSample, PolicySpaces
from esper.tamiyo.diagnostics import KeepCullCounts
from esper.tolaria.datasets import TaskData
from esper.tolaria.environment import EnvConfig, MorphogeneticEnv, StepResult


@dataclass(frozen=True)
class TrainerConfig:
    """Everything that decides what a PPO run learns (saved in every checkpoint)."""

    episodes: int
    """Total episodes of the run, counting those done before a resume."""
    n_envs: int
    rng_seed: int = 0
    hidden: int = 128
    observe_budget: bool = False
    """The policy observes the compute budget (`ObservationLayout.budget_blueprints`)."""
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


def assign_devices(n_envs: int, devices: Sequence[torch.device]) -> list[torch.device]:
    """Env i runs on devices[i % len(devices)] (round-robin)."""
    if not devices:
        raise ValueError("at least one device is needed")
    return [devices[i % len(devices)] for i in range(n_envs)]


class MorphogeneticEnvs:
    """This rank's envs, as `RolloutEnvs` for the loop, and what a round of them reports."""

    def __init__(
        self,
        config: TrainerConfig,
        envs: list[MorphogeneticEnv],
        spaces: PolicySpaces,
        learner: Learner,
        ctx: DistContext = SINGLE_PROCESS,
        twin: MorphogeneticEnv | None = None,
    ) -> None:
        """`learner` supplies the shared data order and the count of episodes done (which
        episodes, and so which RNG seeds, come next)."""
        self.config, self.all_envs, self.spaces, self.learner, self.ctx = config, envs, spaces, learner, ctx
        self.twin = twin
        if config.reward.static_baseline and twin is None:
            raise ValueError("the reward's static_baseline needs a static twin env")
        self.reward = RewardFunction(config.reward, config.ppo.gamma)
        self.data: TaskData = envs[0].passes.data
        self.max_round_steps = envs[0].config.max_epochs
        self.envs: list[MorphogeneticEnv] = []
        self.last_test_accuracy: list[float] = []
        """Each env's test accuracy at the end of the last finished round (reports only)."""
        self.trained_rng_seeds: list[int] = []
        """Every RNG seed an episode of this run has trained on (all ranks'), in episode order: a
        checkpoint records them so that evaluation can refuse them."""

    @property
    def n_envs(self) -> int:
        return len(self.envs)

    # ----------------------------------------------------------------- RolloutEnvs
    def begin_round(self) -> torch.Tensor:
        """The next episodes: every rank runs as many envs (so their updates run the same
        collectives), so a last partial round may run up to `world_size - 1` episodes more."""
        remaining = self.config.episodes - self.learner.episodes_done
        n = min(self.config.n_envs, math.ceil(remaining / self.ctx.world_size))
        self.envs = self.all_envs[:n]
        first = self.learner.episodes_done + self.ctx.rank * n
        self.episodes = list(range(first, first + n))
        seeds = episode_seeds(self.config, first, n)
        self.signals: list[TrainingSignals] = [
            env.reset(seed, ep) for env, ep, seed in zip(self.envs, self.episodes, seeds, strict=True)
        ]
        if self.twin is not None:  # every env of the round has its seed
            self.twin_signals = self.twin.reset(seeds[0], first)
        self.running = [True] * n
        self.returns = [0.0] * n
        self.reward_parts: list[RewardBreakdown] = []
        self.ops: list[int] = []
        self.panics = 0
        self.keep_cull = KeepCullCounts()
        return torch.ones(n, dtype=torch.bool)

    def acting(self) -> list[int]:
        return [i for i, running in enumerate(self.running) if running]

    def observe(self, ids: list[int]) -> torch.Tensor:
        return torch.stack([self.spaces.layout.featurize(self.signals[i]) for i in ids])

    def masks(self, ids: list[int]) -> FactoredMasks:
        firsts, conditionals = [], []
        for i in ids:
            first, conditional = self.spaces.actions.conditional_masks(self.signals[i], self.envs[i].config.thresholds)
            firsts.append(first)
            conditionals.append(conditional)
        device = self.learner.device
        return FactoredMasks(
            first=torch.stack(firsts).to(device),
            conditional=tuple(torch.stack(heads).to(device) for heads in zip(*conditionals, strict=True)),
            head_active=self.spaces.actions.head_active_table().to(device),
        )

    def step(self, ids: list[int], sample: FactoredSample) -> EnvStep:
        decisions = [self.spaces.actions.decode(*row) for row in sample.actions.tolist()]
        assert sample.pair_probs is not None  # the op and slot heads
        pair_probs = sample.pair_probs.cpu()  # one copy for the step, not one per env
        for row, i in enumerate(ids):
            self.keep_cull.record(self.signals[i], pair_probs[row])
        results = self.train_epoch(ids, decisions)
        static_gain = None
        if self.twin is not None:
            twin_result = results.pop()
            static_gain = twin_result.signals.val_accuracy - self.twin_signals.val_accuracy
            self.twin_signals = twin_result.signals
        rewards, terminated = [], []
        for i, decision, result in zip(ids, decisions, results, strict=True):
            panic = result.panic is not None
            parts = self.reward(self.signals[i], result.signals, result.done, panic, static_gain)
            rewards.append(parts.total)
            terminated.append(result.done)
            self.returns[i] += parts.total
            self.reward_parts.append(parts)
            self.ops.append(int(decision.op))
            self.panics += panic
            self.signals[i] = result.signals
            self.running[i] = not result.done
        return EnvStep(torch.tensor(rewards), torch.tensor(terminated), torch.zeros(len(ids), dtype=torch.bool))

    def train_epoch(self, ids: list[int], decisions: list[Decision]) -> list[StepResult]:
        """Every env in `ids` executes its decision and trains one epoch on the same shared batches;
        so does the static twin, if any, waiting (its result comes last)."""
        envs = [self.envs[i] for i in ids]
        if self.twin is not None:
            envs.append(self.twin)
            decisions = [*decisions, Decision(LifecycleOp.WAIT)]
        for env, decision in zip(envs, decisions, strict=True):
            env.begin_step(decision)
        current = envs[0]
        try:
            batch_size = envs[0].config.task.batch_size
            for x, y in self.data.train_batches(batch_size, self.learner.data_generator):
                for env in envs:
                    current = env
                    env.train_batch(x, y)  # each env moves the batch to its device, on its own stream
        except Exception as exc:
            where = f"episode {current.clock.episode}, epoch {current.clock.epoch}"  # before the undo
            for env in envs:
                env.abort_step()
            first_line = next(iter(str(exc).splitlines()), "")
            raise EnvFailure(f"an env failed ({where}): {type(exc).__name__}: {first_line}") from exc
        except BaseException:
            for env in envs:
                env.abort_step()
            raise
        for env in envs:
            env.launch_measurement()
        return [env.end_step() for env in envs]

    # ----------------------------------------------------------------- reports
    def round_metrics(self, done: RoundUpdate) -> dict[str, float]:
        """The round's row, reduced over ranks. Each env's test accuracy is measured here, after
        its episode, outside anything the policy sees or is rewarded for."""
        n = self.n_envs
        test_accuracy = [env.evaluate_test().accuracy for env in self.envs]
        self.last_test_accuracy = test_accuracy
        row = common_metrics(self.learner, done, HEADS)
        row.update(
            {
                "episodes": self.learner.episodes_done,
                "charts/episodic_return": sum(self.returns) / n,
                "charts/episodic_length": done.steps / n,
                "charts/final_test_accuracy": sum(test_accuracy) / n,
                "charts/final_val_accuracy": sum(s.val_accuracy for s in self.signals) / n,
                "charts/seed_param_share": sum(s.seed_param_share for s in self.signals) / n,
                "charts/extra_compute_share": sum(s.extra_compute_share for s in self.signals) / n,
                "charts/seeds_germinated": sum(s.seeds_germinated for s in self.signals) / n,
                "charts/fossilized_seeds": sum(_fossilized(env) for env in self.envs) / n,
                "charts/panics": float(self.panics),
            }
        )
        if self.twin is not None:
            row["charts/static_twin_val_accuracy"] = self.twin_signals.val_accuracy
        for op in LifecycleOp:
            row[f"charts/op_{op.name.lower()}"] = sum(o == int(op) for o in self.ops) / max(len(self.ops), 1)
        for part in dataclasses.fields(RewardBreakdown):
            row[f"rewards/{part.name}"] = sum(getattr(p, part.name) for p in self.reward_parts) / n
        row = reduce_metrics(self.ctx, row)
        row.update(keep_cull_metrics(self.ctx, self.keep_cull))
        return row


class EnvFailure(RuntimeError):
    """An env raised inside a step: every env of the step was put back as it was, and the run
    stops with this one-line message (its checkpoints stay as they were)."""


def keep_cull_metrics(ctx: DistContext, local: KeepCullCounts) -> dict[str, float]:
    """The round's keep/cull diagnostic over every rank (`esper.tamiyo.diagnostics`): the counts of
    each label, and the AUC where both occurred (the same keys on every rank)."""
    counts = KeepCullCounts(ctx.all_reduce_sum(local.counts.to(ctx.device)).cpu() if ctx.enabled else local.counts)
    row = {
        "diagnostics/keep_cull_helpful": float(counts.helpful),
        "diagnostics/keep_cull_harmful": float(counts.harmful),
    }
    auc = counts.auc()
    if auc is not None:
        row["diagnostics/keep_cull_auc"] = auc
    return row


def episode_seeds(config: TrainerConfig, first: int, n: int) -> list[int]:
    """The RNG seeds of episodes `first .. first + n - 1`, run together in one round on one rank:
    one each (`rng_seed + e`), or with the reward's static baseline the first one for all (so one
    static twin serves them)."""
    if config.reward.static_baseline:
        return [config.rng_seed + first] * n
    return [config.rng_seed + e for e in range(first, first + n)]


def _fossilized(env: MorphogeneticEnv) -> int:
    return sum(r.final_stage == "FOSSILIZED" for r in env.seeds.records)


SUMMED_METRICS: tuple[str, ...] = ("charts/panics", "charts/SPS")
"""Metrics added over ranks; the others are averaged (counters are already global)."""
GLOBAL_METRICS: tuple[str, ...] = ("round", "episodes", "global_step")
TIMING_METRICS: tuple[str, ...] = ("charts/SPS", "time/round_seconds")
"""Wall-clock metrics: the only ones that differ between a run and its exact resume."""


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


def build_trainer(
    config: TrainerConfig,
    env_config: EnvConfig,
    data: TaskData,
    devices: Sequence[torch.device],
    policy_device: torch.device,
    blueprints: tuple[str, ...] | None = None,
    ctx: DistContext = SINGLE_PROCESS,
    emit=None,
) -> tuple[MorphogeneticEnvs, Learner]:
    """A fresh run: this rank's envs spread round-robin over `devices` (each ending its episode at
    a governor panic), the spaces derived from the task, a learner, and with the reward's static
    baseline a static twin. Episode `e` trains with the RNG seed `episode_seeds` gives it, on
    whichever rank runs it."""
    task = env_config.task
    spaces = PolicySpaces.derive(task.topology, task.slot_names, blueprints, config.observe_budget)
    panics_end = dataclasses.replace(env_config, end_episode_on_panic=True)
    envs = [
        MorphogeneticEnv(dataclasses.replace(panics_end, device=device), data, emit)
        for device in assign_devices(config.n_envs, devices)
    ]
    twin = None
    if config.reward.static_baseline:  # on the first env's device; a panic there is rolled back, not an end
        twin = MorphogeneticEnv(dataclasses.replace(env_config, device=devices[0]), data)
    learner = make_learner(spaces, config.hidden, config.ppo.learning_rate, config.rng_seed, policy_device, ctx)
    return MorphogeneticEnvs(config, envs, spaces, learner, ctx, twin), learner


def run_round(envs: MorphogeneticEnvs, learner: Learner, on_step: Callable[[int], None] | None = None) -> dict:
    """Collect one episode per env (fewer in a last, partial round), update the policy, and
    return the round's metrics."""
    rollout = collect(learner, envs, envs.config.ppo, on_step)
    done = update(learner, rollout, envs.config.ppo, envs.ctx)
    first, n = learner.episodes_done, envs.n_envs
    learner.episodes_done += n * envs.ctx.world_size
    for rank in range(envs.ctx.world_size):
        envs.trained_rng_seeds.extend(episode_seeds(envs.config, first + rank * n, n))
    return envs.round_metrics(done)
