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

from esper.simic.buffer import RolloutBuffer
from esper.simic.distributed import SINGLE_PROCESS, DistContext, average_gradients
from esper.simic.loss import PPOLossConfig, ppo_loss
from esper.tamiyo.distributions import evaluate_factored


@dataclass(frozen=True)
class PPOConfig:
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
            "losses/clipfrac": self.clipfrac,
            "losses/explained_variance": self.explained_variance,
            "losses/update_epochs": float(self.epochs_run),
            "losses/kl_early_stop": float(self.stopped_early),
        }
        row.update({f"losses/entropy_{n}": e for n, e in zip(head_names, self.head_entropy, strict=True)})
        return row


def ppo_update(
    policy: nn.Module,
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
    explained = buffer.explained_variance()
    adv_mean, adv_std = advantage_statistics(buffer, ctx) if config.norm_adv else (0.0, 1.0)
    sums: dict[str, torch.Tensor] = {}
    approx_kl = torch.zeros(())
    epochs_run, minibatches_run, stopped = 0, 0, False
    policy.train()
    for _ in range(config.update_epochs):
        for mb in buffer.minibatches(config.num_minibatches, generator):
            logits, values, _ = policy(mb.obs, mb.initial_state, mb.episode_start)
            valid_logits = [lg[mb.valid] for lg in logits]
            new_log_probs, entropies = evaluate_factored(valid_logits, mb.masks, mb.actions)
            advantages = (mb.advantages - adv_mean) / adv_std
            out = ppo_loss(
                new_log_probs,
                mb.old_log_probs,
                mb.head_active,
                entropies,
                advantages,
                values[mb.valid],
                mb.old_values,
                mb.returns,
                loss_config,
            )
            approx_kl = ctx.all_reduce_mean(out.approx_kl.detach())
            if config.target_kl is not None and float(approx_kl) > 1.5 * config.target_kl:
                stopped = True
                break
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            average_gradients(ctx, policy)
            nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
            optimizer.step()
            minibatches_run += 1
            for key, value in (
                ("policy_loss", out.policy_loss),
                ("value_loss", out.value_loss),
                ("entropy", out.entropy),
                ("clipfrac", out.clipfrac),
                ("head_entropy", out.head_entropy),
            ):
                sums[key] = sums.get(key, 0.0) + value.detach()
        if stopped:
            break
        epochs_run += 1
    n = max(minibatches_run, 1)
    means = {k: (v / n) for k, v in sums.items()}
    n_heads = len(buffer.head_sizes)
    return UpdateStats(
        policy_loss=float(means.get("policy_loss", 0.0)),
        value_loss=float(means.get("value_loss", 0.0)),
        entropy=float(means.get("entropy", 0.0)),
        head_entropy=means["head_entropy"].tolist() if "head_entropy" in means else [0.0] * n_heads,
        approx_kl=float(approx_kl),
        clipfrac=float(means.get("clipfrac", 0.0)),
        explained_variance=explained,
        epochs_run=epochs_run,
        minibatches_run=minibatches_run,
        stopped_early=stopped,
    )
