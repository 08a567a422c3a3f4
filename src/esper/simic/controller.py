"""A learned policy as a `Controller`: it drives one env, with no trainer around it.

It sees what the trainer's policy saw: the env's signals featurized by the policy's observation
layout and normalized with the statistics the policy was trained with (frozen here), and it acts
under the masks of the same action space, so every decision is executable. A policy trained
with some slots (`ppo --slots`) acts only in those: in an env that enables more, the others are
masked for it as they were in training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch

from esper.kasmina import StageChange
from esper.leyline import Decision, GateThresholds, TrainingSignals
from esper.simic.checkpoint import POLICY_KEYS, check_compatible, payload_policy_sha256, read_checkpoint
from esper.simic.normalizer import RunningMeanStd
from esper.tamiyo import HEADS, PolicySpaces, RecurrentPolicy
from esper.tamiyo.diagnostics import DecisionDiagnostics
from esper.tolaria import TaskSpec, get_task
from esper.tolaria.rng import seeded_init


class PolicyController:
    def __init__(
        self,
        policy: RecurrentPolicy,
        spaces: PolicySpaces,
        obs_norm: RunningMeanStd,
        thresholds: GateThresholds | None = None,
        greedy: bool = True,
        rng_seed: int = 0,
        slots: Sequence[str] | None = None,
    ) -> None:
        """`greedy` takes each head's most probable valid choice; otherwise actions are sampled
        from a generator seeded by `rng_seed`. `thresholds` must be the env's (they shape the masks).
        `slots`: the slots the policy may act in (None: every slot the env enables)."""
        self.policy, self.spaces, self.obs_norm = policy.eval(), spaces, obs_norm
        self.slots = None if slots is None else tuple(slots)
        self.thresholds = thresholds or GateThresholds()
        self.greedy = greedy
        self.generator = torch.Generator().manual_seed(rng_seed)
        self.task_name: str | None = None
        """The task a loaded policy was trained on (None for a fresh one)."""
        self.training_seeds: tuple[int, ...] = ()
        """The RNG seeds a loaded policy's training episodes used: not held out."""
        self.policy_sha256: str | None = None
        """A loaded policy's `policy_sha256` (None for a fresh one)."""
        self.diagnostics = DecisionDiagnostics(HEADS)
        """Every decision since the controller was built (over episodes): op mix, head entropies,
        keep/cull AUC (`esper.tamiyo.diagnostics`)."""
        self.reset()

    @staticmethod
    def fresh(
        task: TaskSpec,
        blueprints: Sequence[str] | None = None,
        rng_seed: int = 0,
        hidden: int = 128,
        observe_budget: bool = False,
        **kwargs,
    ) -> PolicyController:
        """An untrained policy for `task`'s host, initialised from `rng_seed`."""
        spaces = PolicySpaces.derive(task.topology, task.slot_names, blueprints, observe_budget)
        with seeded_init(rng_seed):
            policy = RecurrentPolicy(spaces.layout.obs_dim, spaces.actions.head_sizes, hidden, hidden)
        return PolicyController(policy, spaces, RunningMeanStd(spaces.layout.obs_dim), rng_seed=rng_seed, **kwargs)

    @staticmethod
    def from_checkpoint(path: str | Path, **kwargs) -> PolicyController:
        """The policy of an `esper ppo` checkpoint, with the observation statistics it was trained
        with; a `CheckpointError` for a file that is not one, or a policy whose spaces the
        checkpoint's task no longer has."""
        path = Path(path)
        payload = read_checkpoint(path, POLICY_KEYS)
        task = get_task(payload["settings"]["task"])
        # the run's --blueprints (None: all): the signature lists the head's full order, not these
        blueprints = payload["settings"].get("blueprints")
        observe_budget = bool(payload["trainer"].get("observe_budget", False))  # absent before 2026-11-28
        spaces = PolicySpaces.derive(task.topology, task.slot_names, blueprints, observe_budget)
        check_compatible(path, payload["spaces"], spaces.signature())
        hidden = int(payload["trainer"]["hidden"])
        policy = RecurrentPolicy(spaces.layout.obs_dim, spaces.actions.head_sizes, hidden, hidden)
        policy.load_state_dict(payload["learner"]["policy"])
        obs_norm = RunningMeanStd(spaces.layout.obs_dim)
        obs_norm.load_state_dict(payload["learner"]["obs_norm"])
        kwargs.setdefault("thresholds", GateThresholds(**payload["knobs"].get("gates", {})))  # the run's masks
        kwargs.setdefault("slots", payload["settings"].get("slots"))  # None: the task's every slot
        controller = PolicyController(policy, spaces, obs_norm, **kwargs)
        controller.task_name = task.name
        controller.training_seeds = tuple(int(seed) for seed in payload["training_seeds"])
        controller.policy_sha256 = payload_policy_sha256(payload)
        return controller

    def reset(self) -> None:
        """A new episode: the LSTM state starts at zero."""
        self.state = self.policy.initial_state(1, torch.device("cpu"))
        self.episode_start = torch.ones(1, dtype=torch.bool)

    @torch.no_grad()
    def decide(self, signals: TrainingSignals) -> Decision:
        signals = self.as_trained(signals)
        obs = self.obs_norm.normalize(self.spaces.layout.featurize(signals)[None])
        masks = self.spaces.actions.masks(signals, self.thresholds)
        step = self.policy.act(obs, self.state, self.episode_start, masks, generator=self.generator, greedy=self.greedy)
        self.state, self.episode_start = step.state, torch.zeros(1, dtype=torch.bool)
        sample = step.sample
        assert sample.pair_probs is not None  # the op and slot heads
        op = int(sample.actions[0, 0])
        self.diagnostics.record(signals, op, sample.entropies[0], sample.pair_probs[0])
        return self.spaces.actions.decode(*sample.actions[0].tolist())

    def as_trained(self, signals: TrainingSignals) -> TrainingSignals:
        """The env's signals with the slots the policy was not trained to act in disabled (its
        observation does not show which slots are enabled, so only its masks change)."""
        if self.slots is None:
            return signals
        slots = tuple(s if s.name in self.slots else dataclasses.replace(s, enabled=False) for s in signals.slots)
        return dataclasses.replace(signals, slots=slots)

    def record_step(self, decision: Decision, changes: Sequence[tuple[str, StageChange]]) -> None:
        """A policy learns only in training; the LSTM state carries what it needs."""
