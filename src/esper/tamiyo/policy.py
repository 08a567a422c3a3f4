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


class RecurrentPolicy(nn.Module):
    """obs -> MLP -> LSTM -> one logits head per action head, and V(s).

    Initialisation follows the recurrent-PPO recipe: orthogonal weights, gain sqrt(2) for the
    feature layers, 0.01 for the action heads (near-uniform first policy, so no head starts
    collapsed) and 1 for the value head; LSTM weights orthogonal with zero biases.
    Sequences are (T, B, ...) and the LSTM state is zeroed wherever `episode_start` is set.
    """

    def __init__(self, obs_dim: int, head_sizes: tuple[int, ...], hidden: int = 128, lstm_hidden: int = 128) -> None:
        super().__init__()
        self.head_sizes = tuple(head_sizes)
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
        self.heads = nn.ModuleList(_orthogonal(nn.Linear(lstm_hidden, n), 0.01) for n in self.head_sizes)
        self.value_head = _orthogonal(nn.Linear(lstm_hidden, 1), 1.0)

    def initial_state(self, batch: int, device: torch.device | None = None) -> LSTMState:
        """Zeros: the state at the start of every episode."""
        shape = (self.lstm.num_layers, batch, self.lstm.hidden_size)
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
        features = self.encoder(obs)
        h, c = state
        outputs = []
        # Run the LSTM in one call over each stretch with no episode start inside it: a rollout
        # step is one stretch, and an update over whole episodes is one stretch per sequence.
        resets = episode_start.bool()
        starts = [0, *(torch.nonzero(resets[1:].any(dim=1)).flatten() + 1).tolist()]
        for begin, end in zip(starts, [*starts[1:], obs.shape[0]], strict=True):
            keep = (~resets[begin]).to(h.dtype).view(1, -1, 1)
            out, (h, c) = self.lstm(features[begin:end], (h * keep, c * keep))
            outputs.append(out)
        hidden = torch.cat(outputs)
        logits = [head(hidden).float() for head in self.heads]
        return logits, self.value_head(hidden).squeeze(-1).float(), (h, c)

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
