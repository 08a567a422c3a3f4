"""The single morphogenetic environment as a Gymnasium env, so any RL library can drive it.

Why: Esper's own trainer (`esper.simic.morphogenetic_envs`) steps many envs in lockstep on shared
batches; other libraries expect the standard `reset`/`step` interface. This adapter wraps one
`MorphogeneticEnv` and keeps the trainer's semantics:

- observation: `ObservationLayout.featurize`, the deterministic fixed-size vector (float32). It is
  *not* running-normalized; normalizing is the agent's job, as it is in Esper's trainer.
- action: `MultiDiscrete(ActionSpace.head_sizes)`, one index per head (op, slot, blueprint,
  schedule); heads an op does not use are ignored.
- masks: `info["action_masks"]` on every `reset` and `step`, for the state the next action will
  act on (see `action_mask_info`). An action the masks forbid is *not executed*: the step runs
  as WAIT and `info["invalid_action"]` is True (and `invalid_actions` counts them). It never
  raises, so agents that ignore the masks (random agents, `check_env`) can still run; the reward
  is that of the WAIT actually executed. `action_masks()` gives the masks in sb3-contrib's
  MultiDiscrete form (one flat bool vector, each head masked on its own); since a head's valid
  choices depend on the op, that form cannot be exact: `JointDiscreteActions` is the exact one.
- reward: `RewardFunction` on (signals before, signals after, terminal, panic). Its shaping term
  is potential-based only if it discounts with the agent's gamma, so the caller states that gamma
  (`gamma=`) and a reward configured with another one is refused.
- episode end: `terminated` at the last epoch (a whole host training run is the episode, the
  epoch fraction is in the observation, and nothing follows it) and at a governor panic (the
  env is built with `end_episode_on_panic=True`). `truncated` is always False.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, ClassVar

import gymnasium
import numpy as np
import torch
from gymnasium import spaces

from esper.leyline import Decision, TrainingSignals
from esper.simic.rewards import RewardConfig, RewardFunction
from esper.tamiyo import HEADS, ActionSpace, PolicySpaces
from esper.tolaria.datasets import TaskData
from esper.tolaria.environment import EnvConfig, MorphogeneticEnv
from esper.tolaria.tasks import get_task

RNG_SEED_BOUND = 2**62
"""Episode seeds drawn when `reset` gets none (the range `MorphogeneticEnv` itself draws from)."""


def action_mask_info(actions: ActionSpace, signals: TrainingSignals, config: EnvConfig) -> dict[str, np.ndarray]:
    """The masks of the next action, as numpy bool arrays keyed by head name:

    - "op": (n_ops,) the ops that can act somewhere now (WAIT always can);
    - "slot", "schedule": (n_ops, n_k) the valid choices of that head for each op (row `op` is
      the mask to use once the op is chosen);
    - "blueprint": (n_ops, n_slots, n_blueprints) its valid choices for each op and slot (under a
      compute budget, what fits depends on the slot);
    - "head_active": (n_ops, n_heads) which heads an op uses (an inactive head's choice is ignored).

    The same masks, in the same form, as `ActionSpace.conditional_masks` gives Esper's sampler.
    """
    op_mask, conditional = actions.conditional_masks(signals, config.thresholds)
    masks = {HEADS[0]: op_mask.numpy().copy()}
    masks.update({name: m.numpy().copy() for name, m in zip(HEADS[1:], conditional, strict=True)})
    masks["head_active"] = ActionSpace.head_active_table().numpy().copy()
    return masks


def is_allowed(action: np.ndarray, masks: dict[str, np.ndarray]) -> bool:
    """Whether the masks allow `action`: its op, and its choice of every head that op uses."""
    op = int(action[0])
    if not masks[HEADS[0]][op]:
        return False
    active = masks["head_active"][op]
    given = {name: (op, int(action[1])) if masks[name].ndim == 3 else (op,) for name in HEADS[1:]}
    return all(masks[name][(*given[name], int(action[k]))] for k, name in enumerate(HEADS) if k > 0 and active[k])


def shaping_reward_config(reward: RewardConfig | None, gamma: float) -> RewardConfig:
    """The reward for an agent that discounts with `gamma`: the default one at that gamma, or
    `reward` if its shaping gamma is the same (else a `ValueError` naming both)."""
    if reward is None:
        return RewardConfig(gamma=gamma)
    if reward.static_baseline:
        raise ValueError("static_baseline needs the PPO trainer's static twin, which a single Gymnasium env has not")
    if reward.gamma != gamma:
        raise ValueError(
            f"the reward's shaping gamma {reward.gamma} differs from the agent's gamma {gamma}: the shaping "
            f"term would change which policy is optimal; build RewardConfig(gamma={gamma}, ...)"
        )
    return reward


class MorphogeneticGymEnv(gymnasium.Env):
    """One host training run per episode, one epoch per step (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        config: EnvConfig,
        data: TaskData,
        *,
        gamma: float,
        allowed_blueprints: tuple[str, ...] | None = None,
        reward: RewardConfig | None = None,
    ) -> None:
        """`gamma` is the discount of the agent that will drive the env (SB3's default is 0.99)."""
        super().__init__()
        self.config = dataclasses.replace(config, end_episode_on_panic=True)
        self.env = MorphogeneticEnv(self.config, data)
        policy_spaces = PolicySpaces.derive(config.task.topology, config.task.slot_names, allowed_blueprints)
        self.layout, self.actions = policy_spaces.layout, policy_spaces.actions
        self.reward_fn = RewardFunction(shaping_reward_config(reward, gamma), ppo_gamma=gamma)
        self.invalid_actions = 0
        """Actions the masks forbid that this env has run as WAIT, since it was built."""
        self.observation_space = spaces.Box(-np.inf, np.inf, (self.layout.obs_dim,), np.float32)
        self.action_space = spaces.MultiDiscrete(np.array(self.actions.head_sizes, dtype=np.int64))
        self._signals: TrainingSignals | None = None
        self._masks: dict[str, np.ndarray] | None = None

    # ----------------------------------------------------------------- gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """A fresh host. `seed` makes the episode deterministic (it is the `MorphogeneticEnv`
        seed itself, so a run here matches the heuristic's with the same seed); without one,
        the episode seed is drawn from `self.np_random`, seeded by the last seeded reset."""
        super().reset(seed=seed)
        episode_rng_seed = seed if seed is not None else int(self.np_random.integers(RNG_SEED_BOUND))
        self._signals = self.env.reset(episode_rng_seed)
        return self._observation(), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._signals is None or self._masks is None:
            raise RuntimeError("call reset() before step()")
        action = np.asarray(action, dtype=np.int64).reshape(-1)
        if not self.action_space.contains(action):
            raise ValueError(f"action {action.tolist()} is not in {self.action_space}")
        allowed = is_allowed(action, self._masks)
        self.invalid_actions += not allowed
        decision = self.actions.decode(*action.tolist()) if allowed else Decision.wait("masked action")
        before = self._signals
        result = self.env.step(decision)
        panic = result.panic is not None
        parts = self.reward_fn(before, result.signals, terminal=result.done, panic=panic)
        self._signals = result.signals
        info = self._info()
        info.update(invalid_action=not allowed, panic=panic, reward_parts=parts.to_json())
        return self._observation(), float(parts.total), bool(result.done), False, info

    def action_masks(self) -> np.ndarray:
        """sb3-contrib's MultiDiscrete masks: per head, the choices valid for *some* op allowed
        now, concatenated. Not exact (a slot valid for CULL may be invalid for GERMINATE); an
        agent that needs every action executable uses `JointDiscreteActions`."""
        if self._masks is None:
            raise RuntimeError("call reset() before action_masks()")
        op_mask = self._masks[HEADS[0]]
        parts = [op_mask]
        for k, name in enumerate(HEADS[1:], start=1):
            users = op_mask & self._masks["head_active"][:, k]
            rows = self._masks[name][users]
            if rows.ndim == 3:  # per op and slot (the blueprint head): over the slots each op may act on
                rows = (rows & self._masks[HEADS[1]][users][..., None]).any(axis=1)
            # A head no allowed op uses: any choice is ignored, so allow them all.
            parts.append(rows.any(axis=0) if rows.size else np.ones(self._masks[name].shape[-1], dtype=bool))
        return np.concatenate(parts)

    # ----------------------------------------------------------------- helpers
    def _observation(self) -> np.ndarray:
        assert self._signals is not None
        return self.layout.featurize(self._signals).numpy()

    def _info(self) -> dict[str, Any]:
        """Masks for the next action and a few numbers worth logging."""
        assert self._signals is not None
        s = self._signals
        self._masks = action_mask_info(self.actions, s, self.config)
        return {
            "action_masks": {name: mask.copy() for name, mask in self._masks.items()},
            "epoch": s.epoch,
            "val_accuracy": s.val_accuracy,
            "seeds_germinated": s.seeds_germinated,
            "seed_params": s.seed_params,
        }


class JointDiscreteActions(gymnasium.ActionWrapper):
    """One `Discrete` action per executable (op, slot, blueprint, schedule), with exact masks.

    Why: the heads' masks are conditional on the op, which a MultiDiscrete mask cannot express.
    Listing every joint action (WAIT once; each op with only the heads it uses, the others at
    0) turns the conditional masks into one flat mask in which every allowed action is
    executable: sb3-contrib's `MaskablePPO` driving this wrapper sends no invalid action.
    `joint_actions[i]` is the MultiDiscrete action that index `i` stands for.
    """

    def __init__(self, env: MorphogeneticGymEnv) -> None:
        super().__init__(env)
        self.base = env
        sizes = env.actions.head_sizes
        active = ActionSpace.head_active_table().numpy()
        joint: list[tuple[int, ...]] = []
        for op in range(sizes[0]):
            ranges = [range(n) if active[op, k] else range(1) for k, n in enumerate(sizes) if k > 0]
            joint += [(op, *rest) for rest in itertools.product(*ranges)]
        self.joint_actions = np.array(joint, dtype=np.int64)
        self.action_space = spaces.Discrete(len(joint))

    def action(self, action: Any) -> np.ndarray:
        return self.joint_actions[int(action)]

    def action_masks(self) -> np.ndarray:
        """Exactly the joint actions the env would execute now."""
        masks = self.base._masks
        if masks is None:
            raise RuntimeError("call reset() before action_masks()")
        return np.array([is_allowed(a, masks) for a in self.joint_actions], dtype=bool)


def make_morphogenetic_env(
    task: str = "shapes",
    *,
    gamma: float,
    max_epochs: int | None = None,
    slots: tuple[str, ...] | None = None,
    max_germinations: int = 6,
    blueprints: tuple[str, ...] | None = None,
    reward: RewardConfig | None = None,
    device: str = "cpu",
    data_dir: str | None = None,
    joint_actions: bool = False,
) -> gymnasium.Env:
    """The entry point of `gymnasium.make("esper/Morphogenetic-v0", task=..., gamma=...)`, which
    `import esper` registers: the task's env with its defaults (all slots, the task's
    epochs), its data loaded from `data_dir` for the real datasets, and with `joint_actions` the
    exact-mask `JointDiscreteActions` around it."""
    reward = shaping_reward_config(reward, gamma)  # before the data is loaded
    spec = get_task(task)
    config = EnvConfig(
        task=spec,
        device=torch.device(device),
        max_epochs=spec.max_epochs if max_epochs is None else max_epochs,
        enabled_slots=spec.slot_names if slots is None else tuple(slots),
        max_germinations=max_germinations,
    )
    env = MorphogeneticGymEnv(
        config,
        spec.load_data(data_dir),
        gamma=gamma,
        allowed_blueprints=None if blueprints is None else tuple(blueprints),
        reward=reward,
    )
    return JointDiscreteActions(env) if joint_actions else env
