"""Behaviour cloning: a warm start for PPO from another controller's episodes (the tuned heuristic,
or the policy itself with its culls set by the sign of the seeds' contribution).

Why: PPO from a near-uniform policy spends its first rounds germinating and culling at random,
and on a small machine it gets few rounds. A policy that starts as the heuristic starts where the
baseline is, so PPO only has to find what the heuristic misses. The critic is fitted in the same
pass to the demonstrations' returns under the run's reward, so the first PPO advantages are not
value-function noise.

A demonstration is one whole episode of the demonstrator: the observation the policy would have
seen, the masks it would have acted under, and the demonstrator's decision encoded as one index
per head (`ActionSpace.encode`). Cloning maximises the log-probability of those actions over
the active heads (re-running whole episodes through the LSTM, as the PPO update does) and
regresses the value on the return to go.

A cloning may also take only the demonstrator's *keep/cull decisions* (`decisions="keep-cull"`):
the steps at which a slot holds a probationary seed with a measured contribution, the decisions
the keep/cull AUC scores (`esper.tamiyo.diagnostics`). Why: a policy PPO has trained already
grows as it learned to, and a second, short cloning from a heuristic that culls harmful seeds
teaches it to cull them while the steps with no seed on probation (most of them, where it
decides when to grow) are not fitted. Only a decision about the scored seed is fitted: WAIT, or
FOSSILIZE or CULL of a slot on probation; the demonstrator's other decisions at those steps
(germinating in another slot, culling a blending seed) are not about keeping or culling that
seed. Neither form has yet given a better policy (README, v16 and v17). The critic is fitted on
every step, to the demonstrator's returns, as in a warm start.

The demonstrator is the tuned heuristic, or `SignCulls`: the run's own policy, whose culls of
probationary seeds follow the sign of their measured contribution. Why the second: a policy PPO
trained grows differently from the heuristic, so the heuristic's episodes hold few of the states
in which the policy meets a harmful seed on probation (the heuristic culls its harmful seeds
earlier, or grows others); the policy's own episodes hold exactly those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from esper.kasmina import StageChange
from esper.leyline import Decision, LifecycleOp, TrainingSignals
from esper.simic.controller import PolicyController
from esper.simic.loop import Learner
from esper.simic.rewards import RewardFunction
from esper.tamiyo import PolicySpaces, RecurrentPolicy
from esper.tamiyo.diagnostics import scored_slots
from esper.tamiyo.distributions import MaskedCategorical, evaluate_factored, resolve_mask
from esper.tolaria.environment import MorphogeneticEnv
from esper.tolaria.episode import Controller


@dataclass(frozen=True)
class Demonstration:
    """One episode of a demonstrator, as a policy would have lived it."""

    raw_obs: torch.Tensor
    """(T, obs_dim) featurized, not normalized."""
    actions: torch.Tensor
    """(T, H) int64: the demonstrator's decisions, encoded."""
    masks: torch.Tensor
    """(T, n0 + n1 + ...) bool: each head's mask resolved for the demonstrated op."""
    head_active: torch.Tensor
    """(T, H) bool."""
    rewards: torch.Tensor
    """(T,) float32 under the run's reward."""
    keep_cull: torch.Tensor
    """(T,) bool: a keep/cull decision (`is_keep_cull_decision`)."""
    verdict: torch.Tensor
    """(T,) bool: a verdict on a scored seed, FOSSILIZE or CULL of it (`is_verdict`)."""

    @property
    def returns(self) -> torch.Tensor:
        """(T,) the undiscounted return to go (the trainer's gamma is 1)."""
        return self.rewards.flip(0).cumsum(0).flip(0)


def demonstrate(
    env: MorphogeneticEnv,
    controller: Controller,
    spaces: PolicySpaces,
    reward: RewardFunction,
    rng_seed: int,
    episode: int,
) -> Demonstration:
    """Run one episode of `controller` in `env`, recording what the policy would have seen. Under
    a reward with a static baseline, a static episode on the same seed (the env's own data order
    is the seed's) runs first and is the twin the rewards subtract."""
    actions_space, thresholds = spaces.actions, env.config.thresholds
    head_active = actions_space.head_active_table()
    obs, actions, masks, active, rewards, keep_cull, verdict = [], [], [], [], [], [], []
    static = static_accuracies(env, rng_seed, episode) if reward.config.static_baseline else None
    signals = env.reset(rng_seed, episode)
    controller.reset()
    done = False
    while not done:
        decision = controller.decide(signals)
        action = actions_space.encode(decision)
        first, conditional = actions_space.conditional_masks(signals, thresholds)
        row, chosen = torch.zeros(1, dtype=torch.long), [torch.tensor([action[0]]), torch.tensor([action[1]])]
        heads = [first, *(resolve_mask(mask[None], row, chosen)[0] for mask in conditional)]
        on = head_active[action[0]]
        if not all(mask[index] for mask, index, used in zip(heads, action, on, strict=True) if used):
            raise ValueError(f"the demonstrator chose {decision}, which the policy's masks forbid: it cannot be cloned")
        obs.append(spaces.layout.featurize(signals))
        actions.append(torch.tensor(action))
        masks.append(torch.cat(heads))
        active.append(on)
        keep_cull.append(is_keep_cull_decision(signals, decision))
        verdict.append(is_verdict(signals, decision))
        result = env.step(decision)
        controller.record_step(decision, result.changes)
        static_gain = None if static is None else static[len(rewards) + 1] - static[len(rewards)]
        parts = reward(signals, result.signals, result.done, result.panic is not None, static_gain)
        rewards.append(parts.total)
        signals, done = result.signals, result.done
    return Demonstration(
        torch.stack(obs),
        torch.stack(actions),
        torch.stack(masks),
        torch.stack(active),
        torch.tensor(rewards),
        torch.tensor(keep_cull, dtype=torch.bool),
        torch.tensor(verdict, dtype=torch.bool),
    )


class SignCulls:
    """A demonstrator that is a policy except at its keep/cull decisions: it culls a seed on
    probation whose measured contribution is at or below zero (the first such slot), and where
    the policy would cull a seed on probation above zero it waits instead. Everything else,
    when and where to grow, is the policy's own. Zero, not a gate setting, because the
    contribution's sign is what the keep/cull AUC scores (`esper.tamiyo.diagnostics`). Under the
    default gates a seed the policy waits on is culled by the lifecycle only if its *next*
    reading is at or below `probation_cull_contribution` (0), and on `shapes` a first reading at
    or below zero is mostly above zero one epoch later (`experiments/keep-cull-reading/first_readings.py`), so this
    teacher culls seeds the lifecycle would have kept: it trades accuracy for the AUC."""

    def __init__(self, policy: PolicyController) -> None:
        self.policy = policy

    def reset(self) -> None:
        self.policy.reset()

    def decide(self, signals: TrainingSignals) -> Decision:
        decision = self.policy.decide(signals)  # always, so the LSTM state follows the episode
        scored = [s for _, s in scored_slots(self.policy.as_trained(signals)) if s.enabled]
        harmful = [s.name for s in scored if s.contribution is not None and s.contribution <= 0]
        if harmful:
            return Decision(LifecycleOp.CULL, slot=harmful[0], reason="contribution <= 0 on probation")
        if decision.op is LifecycleOp.CULL and decision.slot in {s.name for s in scored}:
            return Decision.wait(reason="contribution > 0 on probation")
        return decision

    def record_step(self, decision: Decision, changes: Sequence[tuple[str, StageChange]]) -> None:
        self.policy.record_step(decision, changes)


def is_keep_cull_decision(signals: TrainingSignals, decision: Decision) -> bool:
    """A slot holds a scored probationary seed, and the decision is about it: WAIT, or a verdict
    on it (`is_verdict`)."""
    if decision.op is LifecycleOp.WAIT:
        return bool(scored_slots(signals))
    return is_verdict(signals, decision)


def is_verdict(signals: TrainingSignals, decision: Decision) -> bool:
    """FOSSILIZE or CULL of a slot holding a scored probationary seed: a keep/cull decision that
    is not a WAIT."""
    return decision.op in (LifecycleOp.FOSSILIZE, LifecycleOp.CULL) and decision.slot in {
        s.name for _, s in scored_slots(signals)
    }


def static_accuracies(env: MorphogeneticEnv, rng_seed: int, episode: int) -> list[float]:
    """The selection accuracy of the static host on `rng_seed`, after each epoch from 0 to the end."""
    curve = [env.reset(rng_seed, episode).val_accuracy]
    done = False
    while not done:
        result = env.step(Decision(LifecycleOp.WAIT))
        curve.append(result.signals.val_accuracy)
        done = result.done
    return curve


CLONED_DECISIONS = ("all", "keep-cull", "verdicts", "cull")
"""Which demonstrated decisions a cloning fits: every action, the keep/cull decisions, only the
verdicts among them (fossilize or cull, not wait), or at every step where CULL was open only
whether to cull (and which slot)."""

CLONE_TEACHERS = ("heuristic", "sign-culls")
"""Whose episodes a cloning fits: the heuristic of the run's knobs, or the run's own policy
acting greedily with its keep/cull culls set by the contribution's sign (`SignCulls`)."""


class NothingToClone(ValueError):
    """The demonstrations hold none of the decisions asked for."""


@dataclass(frozen=True)
class CloningStats:
    action_nll: float
    """Mean negative log-likelihood of a cloned action (the sum over its active heads; for a
    `cull` cloning, of the cull-or-not and the slot of a cull)."""
    agreement: float
    """Fraction of cloned steps whose greedy action (active heads) is the demonstrated one."""
    value_loss: float
    cloned_steps: int
    """The demonstrated steps whose actions are fitted (all, or the keep/cull decisions)."""


@dataclass(frozen=True)
class CloningBatch:
    """Demonstrations as (T, B) sequences for the policy, and their V valid steps' targets."""

    obs: torch.Tensor
    valid: torch.Tensor
    starts: torch.Tensor
    actions: torch.Tensor
    masks: torch.Tensor
    active: torch.Tensor
    returns: torch.Tensor
    cloned: torch.Tensor
    """(V,) bool: the valid steps whose actions are fitted."""
    decisions: str = "all"
    """Which decisions (`CLONED_DECISIONS`): `cull` fits the cull-or-not, the others whole actions."""

    @property
    def op_mask(self) -> torch.Tensor:
        """(V, ops) the op head's mask (the first head's, so the masks' first columns)."""
        return self.masks[:, : len(LifecycleOp)]


def cloning_batch(learner: Learner, demonstrations: list[Demonstration], decisions: str = "all") -> CloningBatch:
    """The learner's observation statistics absorb the demonstrations' observations (as after a
    round), which are then normalized with them. `decisions` (`CLONED_DECISIONS`) picks the steps
    whose actions are fitted."""
    if decisions not in CLONED_DECISIONS:
        raise ValueError(f"decisions must be one of {CLONED_DECISIONS}, got {decisions!r}")
    learner.obs_norm.update(torch.cat([d.raw_obs for d in demonstrations]))
    length, device = max(d.raw_obs.shape[0] for d in demonstrations), learner.device

    def padded(values: list[torch.Tensor]) -> torch.Tensor:
        out = values[0].new_zeros((length, len(values), *values[0].shape[1:]))
        for b, v in enumerate(values):
            out[: v.shape[0], b] = v
        return out

    valid = padded([torch.ones(d.raw_obs.shape[0], dtype=torch.bool) for d in demonstrations])
    starts = torch.zeros_like(valid)
    starts[0] = True

    def steps(values: list[torch.Tensor]) -> torch.Tensor:
        """The valid steps in the (t, b) order in which `valid` selects them."""
        return padded(values)[valid].to(device)

    return CloningBatch(
        obs=padded([learner.obs_norm.normalize(d.raw_obs) for d in demonstrations]).to(device),
        valid=valid.to(device),
        starts=starts.to(device),
        actions=steps([d.actions for d in demonstrations]),
        masks=steps([d.masks for d in demonstrations]),
        active=steps([d.head_active for d in demonstrations]).float(),
        returns=steps([d.returns for d in demonstrations]),
        cloned=steps([cloned_steps(d, decisions) for d in demonstrations]),
        decisions=decisions,
    )


def cloned_steps(demonstration: Demonstration, decisions: str) -> torch.Tensor:
    """(T,) bool: the steps of `demonstration` whose actions a cloning of `decisions` fits."""
    if decisions == "keep-cull":
        return demonstration.keep_cull
    if decisions == "verdicts":
        return demonstration.verdict
    if decisions == "cull":  # every step at which CULL was open (the op head's mask)
        return demonstration.masks[:, int(LifecycleOp.CULL)].clone()
    return torch.ones_like(demonstration.keep_cull)


def step_outputs(policy: RecurrentPolicy, batch: CloningBatch) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each head's logits (V, n) and the values (V,) at the batch's valid steps: whole episodes
    re-run through the LSTM, as the PPO update does."""
    state = policy.initial_state(batch.obs.shape[1], batch.obs.device)
    logits, values, _ = policy(batch.obs, state, batch.starts)
    return [head_logits[batch.valid] for head_logits in logits], values[batch.valid]


def cloning_losses(
    policy: RecurrentPolicy, batch: CloningBatch, outputs: tuple[list[torch.Tensor], torch.Tensor] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(action NLL, value loss) of the demonstrations under `policy` (or its `step_outputs`, when
    already computed): for a `cull` cloning the NLL is that of the cull-or-not choice (`cull_nll`)."""
    step_logits, values = step_outputs(policy, batch) if outputs is None else outputs
    log_probs, _ = evaluate_factored(step_logits, batch.masks, batch.actions)
    value_loss = 0.5 * (values - batch.returns).square().mean()
    if batch.decisions == "cull":
        return cull_nll(step_logits[0], log_probs, batch), value_loss
    return -(log_probs * batch.active).sum(-1)[batch.cloned].mean(), value_loss


def cull_nll(op_logits: torch.Tensor, log_probs: torch.Tensor, batch: CloningBatch) -> torch.Tensor:
    """The NLL of the demonstrator's cull-or-not at the steps where CULL was open: log P(CULL)
    plus log P(its slot) where it culled, log P(any other op) where it did not. Why this and not
    its whole action: the odds among the other ops (when to grow, when to fossilize) are left as
    PPO learned them, and the steps where it kept a seed teach not to cull it as much as its
    culls teach culling (a cloning of its culls alone taught v18 to cull everything)."""
    cull = int(LifecycleOp.CULL)
    op_log_probs = MaskedCategorical(op_logits, batch.op_mask).log_probs_all
    log_not_cull = op_log_probs.masked_fill(~other_ops(batch.op_mask), float("-inf")).logsumexp(-1)
    culled = batch.actions[:, 0] == cull
    per_step = torch.where(culled, op_log_probs[:, cull] + log_probs[:, 1], log_not_cull)
    return -per_step[batch.cloned].mean()


@torch.no_grad()
def measure(policy: RecurrentPolicy, batch: CloningBatch) -> CloningStats:
    step_logits, values = step_outputs(policy, batch)
    nll, value_loss = cloning_losses(policy, batch, (step_logits, values))
    greedy, offset = [], 0
    for head_logits, n in zip(step_logits, policy.head_sizes, strict=True):
        head_masks = batch.masks[:, offset : offset + n]
        greedy.append(head_logits.masked_fill(~head_masks, float("-inf")).argmax(-1))
        offset += n
    chosen = torch.stack(greedy, -1)
    match = ((chosen == batch.actions) | ~batch.active.bool()).all(-1)
    if batch.decisions == "cull":  # the cull-or-not, and the slot of a cull
        culled, cull = batch.actions[:, 0] == int(LifecycleOp.CULL), int(LifecycleOp.CULL)
        match = torch.where(
            culled, (chosen[:, 0] == cull) & (chosen[:, 1] == batch.actions[:, 1]), chosen[:, 0] != cull
        )
    match = match[batch.cloned]
    return CloningStats(float(nll), float(match.float().mean()), float(value_loss), int(batch.cloned.sum()))


def other_ops(op_mask: torch.Tensor) -> torch.Tensor:
    """(V, ops) bool: the valid ops other than CULL, the choice a `cull` cloning leaves alone."""
    others = op_mask.clone()
    others[:, int(LifecycleOp.CULL)] = False
    return others


def other_ops_log_probs(op_logits: torch.Tensor, op_mask: torch.Tensor) -> torch.Tensor:
    """(V, ops) log-probabilities of the valid ops other than CULL, renormalized among themselves
    (-inf at CULL and at masked ops): the policy's odds of when to grow, fossilize or wait."""
    return torch.log_softmax(op_logits.masked_fill(~other_ops(op_mask), float("-inf")), dim=-1)


def anchor_kl(op_logits: torch.Tensor, op_mask: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """Mean over the valid steps of KL(start || now): from `anchor`, the starting policy's
    `other_ops_log_probs`, to the policy's. Why: `cull_nll` leaves those odds free, so nothing
    holds them, and a network fitted to it moves them with everything it shares; v19 and v21s,
    fitted without this, came out germinating at epochs 1 and 2 instead of when `policy:shapes` did."""
    log_q = other_ops_log_probs(op_logits, op_mask)
    valid = anchor.isfinite()  # the other ops open at the step; masked ones count 0
    terms = torch.where(valid, anchor.exp() * (anchor - log_q.masked_fill(~valid, 0.0)), 0.0)
    return terms.sum(-1).mean()


def clone(
    learner: Learner,
    demonstrations: list[Demonstration],
    steps: int,
    learning_rate: float,
    vf_coef: float = 0.5,
    decisions: str = "all",
    anchor_coef: float = 0.0,
) -> tuple[CloningStats, CloningStats]:
    """Fit the learner's policy to `demonstrations` with `steps` full-batch Adam steps (an
    optimizer of its own, so PPO's starts with no moments from another loss); the fit
    (before, after). `decisions` (`CLONED_DECISIONS`) picks what is fitted; demonstrations with
    none of it are refused (there would be nothing to fit). `anchor_coef` > 0 (a `cull` cloning
    only) adds that multiple of `anchor_kl` to the starting policy's odds among the other ops."""
    if anchor_coef < 0 or (anchor_coef > 0 and decisions != "cull"):
        raise ValueError(
            f"anchor_coef must be >= 0, and > 0 only for a cull cloning; got {anchor_coef} for {decisions!r}"
        )
    batch = cloning_batch(learner, demonstrations, decisions)
    if not bool(batch.cloned.any()):
        what = {
            "verdicts": "verdict (fossilize or cull of a seed on probation with a measured contribution)",
            "cull": "step at which a seed could be culled",
        }.get(decisions, "keep/cull decision (about a seed on probation with a measured contribution)")
        raise NothingToClone(f"the {len(demonstrations)} demonstrations hold no {what}")
    policy = learner.policy
    optimizer = torch.optim.Adam(policy.parameters(), lr=learning_rate, eps=1e-5)
    before = measure(policy.eval(), batch)
    anchor = None
    if anchor_coef > 0:
        with torch.no_grad():
            (start_op_logits, *_), _ = step_outputs(policy, batch)
            anchor = other_ops_log_probs(start_op_logits, batch.op_mask)
    policy.train()
    for _ in range(steps):
        step_logits, values = step_outputs(policy, batch)
        nll, value_loss = cloning_losses(policy, batch, (step_logits, values))
        loss = nll + vf_coef * value_loss
        if anchor is not None:
            loss = loss + anchor_coef * anchor_kl(step_logits[0], batch.op_mask, anchor)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return before, measure(policy.eval(), batch)
