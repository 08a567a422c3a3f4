"""A rule-based controller over every enabled slot: the baseline a learned policy must beat."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from esper.kasmina.blueprints import Topology, WidthBlueprint, blueprint_names, get_blueprint
from esper.kasmina.lifecycle import StageChange
from esper.leyline import BlendSchedule, Decision, GateThresholds, LifecycleOp, SeedStage, SlotSignals, TrainingSignals

PREFERRED_BLUEPRINTS: dict[Topology, tuple[str, ...]] = {
    Topology.CNN: ("conv_heavy", "conv_light", "depthwise", "bottleneck", "attention", "norm"),
    Topology.TRANSFORMER: ("mlp", "attention", "lora", "norm"),
}
"""Rotation order: most parameters (capacity) first."""

TUNED_DIR = Path(__file__).parent / "tuned"
"""`<task>.json` here holds the heuristic knobs `tools/tune_heuristic.py` found best for a
task (its `heuristic` table); they are that task's defaults in every command."""


def heuristic_rotation(topology: Topology, order: Sequence[str], blueprints: Sequence[str] | None) -> tuple[str, ...]:
    """A heuristic's blueprint rotation: `order` (the knobs' `blueprint_order`; empty: most
    parameters first) narrowed to `blueprints` (a run's `--blueprints`), then the ones
    `blueprints` names that the order does not (width blueprints among them), as given.

    With no `blueprints`, the order may name any blueprint of the topology. Width blueprints are
    only ever chosen by name, so an order that names one has chosen it; the residual blueprints it
    leaves out stay out. A name the topology lacks is a `ValueError` naming the valid ones."""
    order = tuple(order) or PREFERRED_BLUEPRINTS[topology]
    allowed = tuple(blueprints) if blueprints else (*blueprint_names(topology), *order)
    for name in (*order, *allowed):
        get_blueprint(topology, name)
    ordered = tuple(b for b in order if b in allowed)
    return ordered + tuple(b for b in blueprints or () if b not in ordered)


@dataclass(frozen=True)
class HeuristicConfig:
    """The heuristic's knobs: when to germinate, which seeds to keep or cull, blueprint penalties."""

    warmup_epochs: int = 2
    """No germination before this epoch: let the host find its footing first."""
    plateau_patience: int = 1
    """Germinate once validation accuracy has not improved for this many epochs."""
    germination_cooldown: int = 2
    """Epochs between two germinations, so each seed is judged on its own."""
    fossilize_threshold: float = 0.5
    """Keep a probationary seed whose counterfactual contribution is at least this (points)."""
    cull_threshold: float = -0.5
    """Remove a probationary seed whose contribution falls below this (points)."""
    blending_cull_threshold: float = -3.0
    """Remove a seed still blending in only below this: at partial alpha, before the host has
    adapted, a small dip is expected and says little."""
    cull_penalty: float = 1.0
    """Added to a blueprint's penalty each time one of its seeds is culled."""
    penalty_decay: float = 0.8
    """Per-epoch decay of blueprint penalties."""
    penalty_forgotten_below: float = 0.1
    """A penalty that has decayed below this no longer counts: the blueprint is back in rotation
    (about ten epochs after a single cull with the defaults)."""
    schedule: BlendSchedule = BlendSchedule.LINEAR
    blueprint_order: tuple[str, ...] = ()
    """Each slot's blueprint rotation, first choice first; empty: the topology's preferred order
    (most parameters first)."""
    slots: tuple[str, ...] = ()
    """Slots it may germinate in, of the run's enabled ones; empty: every enabled slot. Narrows
    this heuristic alone: other controllers of the run keep the run's `--slots`."""
    grow_together: bool = False
    """Under a compute budget, germinate only while the next seed of every empty slot it may use
    would fit the budget together, so that the budget, not the order of the slots, sets when the
    last one grows: grown one by one as each fits, the first seed spends the room the others
    need and they grow late. The seeds' extra FLOPs are added (each seed's projection over the
    run's as it stands; `TrainingSignals.budget_projections`). On `shapes` that sum is 2% short
    for two width seeds in adjacent blocks, so G0 may hold the last one back an epoch or two.
    The plan leaves out slots that refuse their next blueprint, slots not yet empty (a seed
    embargoed after a cull joins when its slot is free) and slots beyond the germinations left.
    A plan that never fits in time grows nothing: name in `slots` only what should grow."""
    slot_blueprints: tuple[str, ...] = ()
    """`SLOT=BLUEPRINT` pairs: each named slot grows only that blueprint, the others rotate
    through `blueprint_order`. Where a block's width pays differs from where it is cheap (on
    `shapes`, `early` width buys accuracy at a high FLOPs rate, `late` width buys parameters at a
    low one), one rotation for every slot cannot say which size goes where."""

    def with_knobs(self, knobs: dict[str, Any]) -> HeuristicConfig:
        """These knobs with some replaced by plain values, as a file or JSON holds them (the
        schedule by name, the blueprint order as a list); an unknown knob is a ValueError."""
        valid = {f.name for f in fields(self)}
        unknown = sorted(set(knobs) - valid)
        if unknown:
            raise ValueError(f"unknown heuristic knob {unknown[0]!r}; valid: {' '.join(sorted(valid))}")
        values = dict(knobs)
        if isinstance(values.get("schedule"), str):
            names = " ".join(s.name for s in BlendSchedule)
            if values["schedule"] not in BlendSchedule.__members__:
                raise ValueError(f"unknown blend schedule {values['schedule']!r}; choose from: {names}")
            values["schedule"] = BlendSchedule[values["schedule"]]
        for name in ("blueprint_order", "slots", "slot_blueprints"):
            if name in values:
                values[name] = tuple(values[name])
        config = replace(self, **values)
        config.pinned_blueprints()  # a malformed pair fails here, where the knobs are read
        return config

    def pinned_blueprints(self, blueprints: Sequence[str] | None = None) -> dict[str, str]:
        """`slot_blueprints` as slot -> blueprint; a malformed or repeated pair, a slot the
        `slots` knob leaves out, or a blueprint outside the run's `blueprints` (when given) is a
        ValueError naming it."""
        pinned: dict[str, str] = {}
        for pair in self.slot_blueprints:
            slot, sep, blueprint = pair.partition("=")
            if not sep or not slot or not blueprint or slot in pinned:
                raise ValueError(f"slot_blueprints: {pair!r} is not SLOT=BLUEPRINT (one per slot), e.g. early=widen_50")
            if self.slots and slot not in self.slots:
                among = " ".join(self.slots)
                raise ValueError(f"slot_blueprints: {slot!r} is not among the heuristic's slots: {among}")
            if blueprints and blueprint not in blueprints:
                allowed = " ".join(blueprints)
                raise ValueError(f"slot_blueprints {slot}={blueprint}: not among the run's blueprints: {allowed}")
            pinned[slot] = blueprint
        return pinned


def tuned_heuristic_knobs(task_name: str) -> dict[str, Any]:
    """The tuned knobs of a task (empty where none were tuned), as a config file's `[heuristic]`
    table: the layer under every other source of heuristic knobs."""
    path = TUNED_DIR / f"{task_name}.json"
    if not path.is_file():
        return {}
    knobs = json.loads(path.read_text(encoding="utf-8"))["heuristic"]
    try:
        HeuristicConfig().with_knobs(knobs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return knobs


def tuned_heuristic(task_name: str) -> HeuristicConfig:
    """The heuristic of a task: its tuned knobs over the built-in defaults."""
    return HeuristicConfig().with_knobs(tuned_heuristic_knobs(task_name))


class HeuristicController:
    """Decides one op per epoch, checking in this order:

    1. fossilize the first probationary seed whose contribution clears `fossilize_threshold`;
    2. cull the first probationary seed whose contribution is below `cull_threshold`, the first
       blending seed below `blending_cull_threshold`, or any live seed whose gradients explode;
    3. germinate into the first empty enabled slot (host order; of its `slots` knob, if set)
       whose next blueprint fits the compute budget (if any; with `grow_together`, beside every
       other empty slot's next blueprint), when the run has plateaued,
       past warm-up and cooldown, within the seed budget, and with enough epochs left for a
       seed to be trained, blended and judged (the gates' dwell times). Each slot rotates
       through the blueprints on its own, starting with the largest; the blueprint is the next
       in that slot's rotation with the lowest penalty for recent culls (anywhere), or the one
       `slot_blueprints` pins to the slot;
    4. otherwise wait.

    The controller reads the env's `GateThresholds`, so it never asks for an op the gates refuse.
    `decide` has no side effects; `record_step` learns from what the step actually did.
    """

    def __init__(
        self,
        topology: Topology,
        enabled_slots: Sequence[str],
        blueprints: Sequence[str] | None = None,
        config: HeuristicConfig | None = None,
        thresholds: GateThresholds | None = None,
    ) -> None:
        self.config = config or HeuristicConfig()
        self.thresholds = thresholds or GateThresholds()
        self.enabled_slots = tuple(enabled_slots)
        self.topology = topology
        self.rotation = heuristic_rotation(topology, self.config.blueprint_order, blueprints)
        self.pinned = self.config.pinned_blueprints(blueprints)
        for name in self.pinned.values():
            get_blueprint(topology, name)  # a name the topology lacks: ValueError naming the valid ones
        self.reset()

    def reset(self) -> None:
        """Start of an episode: every slot's rotation restarts, penalties clear."""
        self._next = dict.fromkeys(self.enabled_slots, 0)
        self.penalty = dict.fromkeys((*self.rotation, *self.pinned.values()), 0.0)
        self._blueprint_in_slot: dict[str, str] = {}

    def epochs_to_judge(self, blueprint: str) -> int:
        """Steps from a GERMINATE decision to the first FOSSILIZE decision for a seed of
        `blueprint`, by the gates' dwell times (a width seed's own, `GateThresholds.for_width_seed`):
        the training, blending and probation epochs, plus the step whose start executes the
        FOSSILIZE (decisions run before their epoch)."""
        t = self.thresholds
        if isinstance(get_blueprint(self.topology, blueprint), WidthBlueprint):
            t = t.for_width_seed()
        return t.min_training_epochs + t.blend_epochs + t.min_probation_epochs + 1

    def decide(self, signals: TrainingSignals) -> Decision:
        c, t = self.config, self.thresholds
        slots = [s for s in signals.slots if s.enabled]
        for s in slots:
            if (
                s.stage is SeedStage.PROBATIONARY
                and s.epochs_in_stage >= t.min_probation_epochs
                and s.contribution is not None
                and s.contribution >= c.fossilize_threshold
                and s.contribution > t.fossilize_min_contribution
            ):
                return Decision(LifecycleOp.FOSSILIZE, s.name, reason=f"contribution {s.contribution:.2f}")
        cull_below = {SeedStage.BLENDING: c.blending_cull_threshold, SeedStage.PROBATIONARY: c.cull_threshold}
        for s in slots:
            limit = cull_below.get(s.stage)
            if limit is not None and s.contribution is not None and s.contribution < limit:
                return Decision(LifecycleOp.CULL, s.name, reason=f"harmful: contribution {s.contribution:.2f}")
            if s.stage in (SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY) and s.grad_exploding:
                return Decision(LifecycleOp.CULL, s.name, reason=f"exploding gradient {s.grad_norm}")
        ready = (
            signals.epoch >= c.warmup_epochs
            and signals.plateau_epochs >= c.plateau_patience
            and signals.epochs_since_germination >= c.germination_cooldown
            and signals.seeds_germinated < signals.max_germinations
        )
        empty = [s for s in slots if s.stage is SeedStage.DORMANT and (not c.slots or s.name in c.slots)]
        affordable = [s for s in empty if s.affords(self._choose_blueprint(s.name))]  # within a compute budget
        if c.grow_together and not self._plan_fits(signals, empty):
            affordable = []
        if ready and affordable:
            slot = affordable[0].name
            blueprint = self._choose_blueprint(slot)
            if signals.max_epochs - signals.epoch >= self.epochs_to_judge(blueprint):  # judged before the end
                reason = f"plateau of {signals.plateau_epochs} epochs"
                return Decision(LifecycleOp.GERMINATE, slot, blueprint, c.schedule, reason=reason)
        return Decision.wait()

    def _plan_fits(self, signals: TrainingSignals, empty: Sequence[SlotSignals]) -> bool:
        """The next seed of each slot of `empty` fits the compute budget beside the others (see
        `HeuristicConfig.grow_together`); always, without a budget. The plan holds the slots
        that accept their next blueprint, in host order, as many as germinations are left."""
        projections = signals.budget_projections
        if projections is None:
            return True
        shares = [projections.per_slot.get(s.name, {}).get(self._choose_blueprint(s.name)) for s in empty]
        planned = [share for share in shares if share is not None]
        planned = planned[: max(signals.max_germinations - signals.seeds_germinated, 0)]
        extra = sum(share - projections.standing for share in planned)
        return projections.standing + extra <= projections.budget

    def record_step(self, decision: Decision, changes: Sequence[tuple[str, StageChange]]) -> None:
        """Learn from what the step actually did: a germination advances that slot's rotation,
        a cull (by anyone) penalises the blueprint that was culled."""
        for name in self.penalty:
            self.penalty[name] *= self.config.penalty_decay
        for slot, change in changes:
            if change.target is SeedStage.GERMINATED and decision.slot == slot and decision.blueprint is not None:
                self._blueprint_in_slot[slot] = decision.blueprint
                if slot not in self.pinned:
                    self._next[slot] = (self.rotation.index(decision.blueprint) + 1) % len(self.rotation)
            elif change.target is SeedStage.CULLED and slot in self._blueprint_in_slot:
                self.penalty[self._blueprint_in_slot.pop(slot)] += self.config.cull_penalty

    def _choose_blueprint(self, slot: str) -> str:
        """The slot's pinned blueprint, else the next in its rotation, skipping recently culled
        ones. No side effects."""
        if slot in self.pinned:
            return self.pinned[slot]
        n, start = len(self.rotation), self._next[slot]
        floor = self.config.penalty_forgotten_below
        order = []
        for k in range(n):
            penalty = self.penalty[self.rotation[(start + k) % n]]
            order.append((penalty if penalty >= floor else 0.0, k))
        _, k = min(order)
        return self.rotation[(start + k) % n]
