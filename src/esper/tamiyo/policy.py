"""The recurrent policy: feature layers, an LSTM, factored action heads and a value head. It
owns acting (`act`: one batched step, sampled or greedy under masks) and evaluating (`evaluate`:
stored actions re-run over whole sequences), as CleanRL's `get_action_and_value` and SB3's
`evaluate_actions` do, so a trained policy can drive an env with no trainer around it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from esper.tamiyo.distributions import FactoredMasks, FactoredSample, evaluate_factored, sample_factored

LSTMState = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class PolicyStep:
    """One batched decision of K envs."""

    sample: FactoredSample
    """The chosen actions (K, H), their log-probabilities, entropies, active heads and masks."""
    values: torch.Tensor
    """(K,) V of the observations acted on."""
    state: LSTMState
    """The LSTM state after the step."""


@dataclass(frozen=True)
class Evaluation:
    """Stored actions under the current policy, over the V valid steps of some sequences."""

    log_probs: torch.Tensor
    """(V, H) float32."""
    entropies: torch.Tensor
    """(V, H) float32."""
    values: torch.Tensor
    """(V,) float32."""


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class RecurrentTrunk(nn.Module):
    """obs -> two ReLU layers -> LSTM: the features one head group reads.

    Initialisation follows the recurrent-PPO recipe: orthogonal weights with gain sqrt(2) for
    the feature layers; LSTM weights orthogonal with zero biases.
    """

    def __init__(self, obs_dim: int, hidden: int, lstm_hidden: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            _orthogonal(nn.Linear(obs_dim, hidden), math.sqrt(2)),
            nn.ReLU(),
            _orthogonal(nn.Linear(hidden, hidden), math.sqrt(2)),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(hidden, lstm_hidden)
        for name, param in self.lstm.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)

    def forward(self, obs: torch.Tensor, state: LSTMState, resets: torch.Tensor) -> tuple[torch.Tensor, LSTMState]:
        """(T, B, obs_dim) from `state`, zeroing env b's state before step t where `resets[t, b]`."""
        features = self.encoder(obs)
        h, c = state
        outputs = []
        # Run the LSTM in one call over each stretch with no episode start inside it: a rollout
        # step is one stretch, and an update over whole episodes is one stretch per sequence.
        starts = [0, *(torch.nonzero(resets[1:].any(dim=1)).flatten() + 1).tolist()]
        for begin, end in zip(starts, [*starts[1:], obs.shape[0]], strict=True):
            keep = (~resets[begin]).to(h.dtype).view(1, -1, 1)
            out, (h, c) = self.lstm(features[begin:end], (h * keep, c * keep))
            outputs.append(out)
        return torch.cat(outputs), (h, c)


class RecurrentPolicy(nn.Module):
    """Two recurrent trunks: the actor's feeds one logits head per action head, the critic's
    feeds V(s).

    Why two: with one shared trunk, the value loss shapes the features the action heads read,
    and on a task whose returns carry no signal for long stretches (Acrobot-v1 before its first
    success: -1 every step) the policy drifted away from uniform on value-function noise and
    stopped reaching the goal that a random policy reaches in 5% of episodes. Separate actor and
    critic networks are what CleanRL's `ppo.py` uses and sb3-contrib's `RecurrentPPO` defaults to
    (`shared_lstm=False, enable_critic_lstm=True`).

    The LSTM state is the actor's and the critic's side by side on the last dimension, one (h, c)
    pair of shape (1, B, 2 * lstm_hidden), so buffers and loops handle it as one state. Action
    heads start at gain 0.01 (a near-uniform first policy, so no head starts collapsed), the
    value head at gain 1. Sequences are (T, B, ...) and the state is zeroed wherever
    `episode_start` is set.
    """

    def __init__(self, obs_dim: int, head_sizes: tuple[int, ...], hidden: int = 128, lstm_hidden: int = 128) -> None:
        super().__init__()
        self.head_sizes = tuple(head_sizes)
        self.lstm_hidden = lstm_hidden
        self.actor = RecurrentTrunk(obs_dim, hidden, lstm_hidden)
        self.critic = RecurrentTrunk(obs_dim, hidden, lstm_hidden)
        self.heads = nn.ModuleList(_orthogonal(nn.Linear(lstm_hidden, n), 0.01) for n in self.head_sizes)
        self.value_head = _orthogonal(nn.Linear(lstm_hidden, 1), 1.0)

    def initial_state(self, batch: int, device: torch.device | None = None) -> LSTMState:
        """Zeros: the state at the start of every episode."""
        shape = (1, batch, 2 * self.lstm_hidden)
        device = device or next(self.parameters()).device
        return torch.zeros(shape, device=device), torch.zeros(shape, device=device)

    def forward(
        self, obs: torch.Tensor, state: LSTMState, episode_start: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor, LSTMState]:
        """Run a (T, B, obs_dim) sequence from `state`.

        Returns the logits of every head (each (T, B, n), float32), values (T, B) and the state
        after the last step. `episode_start[t, b]` zeroes env b's state before step t, so one call
        can span an episode boundary and the update re-runs exactly what the rollout ran.
        """
        h, c = state
        n = self.lstm_hidden
        resets = episode_start.bool()
        actor_out, (actor_h, actor_c) = self.actor(obs, (h[..., :n], c[..., :n]), resets)
        critic_out, (critic_h, critic_c) = self.critic(obs, (h[..., n:], c[..., n:]), resets)
        logits = [head(actor_out).float() for head in self.heads]
        values = self.value_head(critic_out).squeeze(-1).float()
        return logits, values, (torch.cat([actor_h, critic_h], -1), torch.cat([actor_c, critic_c], -1))

    def act(
        self,
        obs: torch.Tensor,
        state: LSTMState,
        episode_start: torch.Tensor,
        masks: FactoredMasks,
        uniforms: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        greedy: bool = False,
    ) -> PolicyStep:
        """One step of K envs: `obs` (K, obs_dim) normalized, `state` their LSTM states,
        `episode_start` (K,) where each starts an episode. Samples under `masks` from `uniforms`
        (K, H) or `generator`, or takes the most probable valid action when `greedy`."""
        logits, values, new_state = self(obs.unsqueeze(0), state, episode_start.unsqueeze(0))
        sample = sample_factored([lg[0] for lg in logits], masks, generator, uniforms, greedy)
        return PolicyStep(sample, values[0], new_state)

    def evaluate(
        self,
        obs: torch.Tensor,
        initial_state: LSTMState,
        episode_start: torch.Tensor,
        valid: torch.Tensor,
        masks: torch.Tensor,
        actions: torch.Tensor,
    ) -> Evaluation:
        """Re-run whole (T, B) sequences from their stored initial state, and score the stored
        `actions` (V, H) under their stored resolved `masks` at the V `valid` steps."""
        logits, values, _ = self(obs, initial_state, episode_start)
        log_probs, entropies = evaluate_factored([lg[valid] for lg in logits], masks, actions)
        return Evaluation(log_probs, entropies, values[valid])
