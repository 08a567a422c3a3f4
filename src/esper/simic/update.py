"""The PPO update for a recurrent policy with factored, masked action heads.

Host-agnostic: it sees a policy that maps (T, B) observation sequences to per-head logits and
values, and a `RolloutBuffer`. Several epochs over minibatches of whole env sequences, each
re-run from its stored initial LSTM state; advantages normalized over the whole round; global
gradient clipping; an early stop when the approximate KL passes 1.5 x `target_kl` (checked
before the step that would overshoot, as Stable-Baselines3 does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from esper.simic.buffer import Minibatch, RolloutBuffer
from esper.simic.distributed import SINGLE_PROCESS, DistContext, average_gradients
from esper.simic.loss import LossInputs, PPOLossConfig, PPOLossOutput, ppo_loss
from esper.tamiyo.policy import RecurrentPolicy


@dataclass(frozen=True)
class PPOConfig:
    """PPO: discounting, the update's epochs and minibatches, clipping, schedules, KL stop."""

    gamma: float = 0.99
    gae_lambda: float = 0.95
    learning_rate: float = 3e-4
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over `anneal_rounds` rounds."""
    update_epochs: int = 4
    num_minibatches: int = 4
    """Minibatches of whole env sequences per epoch (capped at the number of envs)."""
    clip_coef: float = 0.2
    clip_vloss: bool = False
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    ent_coef_final: float = 0.005
    """The entropy coefficient anneals linearly from `ent_coef` to this over `anneal_rounds` rounds."""
    anneal_rounds: int = 100
    """Horizon of both schedules, fixed rather than the run's length, so that extending a run
    with `--resume --episodes N` replays the same schedule as a run that asked for N at once."""
    max_grad_norm: float = 0.5
    target_kl: float | None = 0.03
    """The update stops when the approximate KL passes 1.5 x this. It is the per-step KL of the
    whole action (all active heads), as CleanRL's is for its single head; before issue 8 it was
    the mean over heads, a stop about 1.56 times looser on the morphogenetic op mix."""
    norm_adv: bool = True

    def __post_init__(self) -> None:
        for name in ("update_epochs", "num_minibatches", "anneal_rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError(f"gamma and gae_lambda must be in [0, 1], got {self.gamma}, {self.gae_lambda}")
        for name in ("clip_coef", "max_grad_norm"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("learning_rate", "vf_coef", "ent_coef", "ent_coef_final"):  # a rate of 0 freezes the policy
            if getattr(self, name) < 0.0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.target_kl is not None and not self.target_kl > 0.0:
            raise ValueError(f"target_kl must be > 0 (or none), got {self.target_kl}")

    def loss_config(self, ent_coef: float) -> PPOLossConfig:
        return PPOLossConfig(self.clip_coef, self.vf_coef, ent_coef, self.clip_vloss)

    def schedule(self, round_index: int) -> tuple[float, float]:
        """(learning rate, entropy coefficient) for the 0-based `round_index`."""
        progress = min(round_index / self.anneal_rounds, 1.0)
        lr = self.learning_rate * max(1.0 - progress, 0.0) if self.anneal_lr else self.learning_rate
        return lr, self.ent_coef + (self.ent_coef_final - self.ent_coef) * progress


def advantage_statistics(buffer: RolloutBuffer, ctx: DistContext) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std of the advantages of every valid step of the round (over all ranks).

    Normalised over the whole round, not per minibatch: a minibatch can be a single env's
    episode, and per-minibatch normalisation would erase which episodes went better than others.
    """
    assert buffer.advantages is not None
    adv = buffer.advantages[buffer.valid].double()
    sums = ctx.all_reduce_sum(torch.stack([adv.new_tensor(adv.numel()), adv.sum(), adv.square().sum()]))
    n = sums[0].clamp_min(1.0)
    mean = sums[1] / n
    var = (sums[2] / n - mean.square()).clamp_min(0.0) * n / (n - 1).clamp_min(1.0)
    return mean.float(), var.sqrt().float() + 1e-8


@dataclass(frozen=True)
class UpdateStats:
    policy_loss: float
    value_loss: float
    entropy: float
    head_entropy: list[float]
    approx_kl: float
    old_approx_kl: float
    """Mean over the minibatches that stepped."""
    clipfrac: float
    explained_variance: float
    epochs_run: int
    minibatches_run: int
    stopped_early: bool

    def metrics(self, head_names: tuple[str, ...]) -> dict[str, float]:
        """CleanRL's metric names, plus the entropy of each head."""
        row = {
            "losses/policy_loss": self.policy_loss,
            "losses/value_loss": self.value_loss,
            "losses/entropy": self.entropy,
            "losses/approx_kl": self.approx_kl,
            "losses/old_approx_kl": self.old_approx_kl,
            "losses/clipfrac": self.clipfrac,
            "losses/explained_variance": self.explained_variance,
            "losses/update_epochs": float(self.epochs_run),
            "losses/kl_early_stop": float(self.stopped_early),
        }
        row.update({f"losses/entropy_{n}": e for n, e in zip(head_names, self.head_entropy, strict=True)})
        return row


def minibatch_loss(
    policy: RecurrentPolicy, mb: Minibatch, advantage_stats: tuple[torch.Tensor, torch.Tensor], config: PPOLossConfig
) -> PPOLossOutput:
    """The PPO loss of one minibatch of whole sequences, re-run by the policy."""
    evaluation = policy.evaluate(mb.obs, mb.initial_state, mb.episode_start, mb.valid, mb.masks, mb.actions)
    mean, std = advantage_stats
    inputs = LossInputs(
        new_log_probs=evaluation.log_probs,
        old_log_probs=mb.old_log_probs,
        head_active=mb.head_active,
        entropies=evaluation.entropies,
        advantages=(mb.advantages - mean) / std,
        new_values=evaluation.values,
        old_values=mb.old_values,
        returns=mb.returns,
    )
    return ppo_loss(inputs, config)


def optimizer_step(
    policy: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, max_grad_norm: float, ctx: DistContext
) -> None:
    """Backward, gradients averaged over ranks (before clipping), global clipping, one step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    average_gradients(ctx, policy)
    nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()


def reduce_stats(
    outputs: list[PPOLossOutput], approx_kl: torch.Tensor, buffer: RolloutBuffer, epochs_run: int, stopped: bool
) -> UpdateStats:
    """The update's statistics: means over the minibatches that stepped, the last KL read."""
    n = max(len(outputs), 1)

    def mean(field: str) -> torch.Tensor | float:
        return sum((getattr(out, field).detach() for out in outputs), torch.zeros(())) / n if outputs else 0.0

    n_heads = len(buffer.head_sizes)
    head_entropy = mean("head_entropy")
    return UpdateStats(
        policy_loss=float(mean("policy_loss")),
        value_loss=float(mean("value_loss")),
        entropy=float(mean("entropy")),
        head_entropy=head_entropy.tolist() if outputs else [0.0] * n_heads,  # type: ignore[union-attr]
        approx_kl=float(approx_kl),
        old_approx_kl=float(mean("old_approx_kl")),
        clipfrac=float(mean("clipfrac")),
        explained_variance=buffer.explained_variance(),
        epochs_run=epochs_run,
        minibatches_run=len(outputs),
        stopped_early=stopped,
    )


def ppo_update(
    policy: RecurrentPolicy,
    optimizer: torch.optim.Optimizer,
    buffer: RolloutBuffer,
    config: PPOConfig,
    ent_coef: float,
    generator: torch.Generator,
    ctx: DistContext = SINGLE_PROCESS,
) -> UpdateStats:
    """Optimise `policy` on the buffer's data (`buffer.compute_returns` must have run).

    Under policy data parallelism (`ctx`), every rank runs this on its own buffer: gradients are
    averaged over ranks after each backward pass (before clipping), and the KL that decides the
    early stop is the mean over ranks, so all ranks stop at the same minibatch. Every rank must
    run the same number of minibatches per epoch (the same number of envs).
    """
    loss_config = config.loss_config(ent_coef)
    stats = advantage_statistics(buffer, ctx) if config.norm_adv else (torch.zeros(()), torch.ones(()))
    outputs: list[PPOLossOutput] = []
    approx_kl = torch.zeros(())
    epochs_run, stopped = 0, False
    policy.train()
    for _ in range(config.update_epochs):
        for mb in buffer.minibatches(config.num_minibatches, generator):
            out = minibatch_loss(policy, mb, stats, loss_config)
            approx_kl = ctx.all_reduce_mean(out.approx_kl.detach())
            if config.target_kl is not None and float(approx_kl) > 1.5 * config.target_kl:
                stopped = True
                break
            optimizer_step(policy, optimizer, out.loss, config.max_grad_norm, ctx)
            outputs.append(out)
        if stopped:
            break
        epochs_run += 1
    return reduce_stats(outputs, approx_kl, buffer, epochs_run, stopped)
