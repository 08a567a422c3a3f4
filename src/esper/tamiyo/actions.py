"""The factored action space of a learned controller, and the masks that keep it executable.

Four heads: op (WAIT, GERMINATE, FOSSILIZE, CULL), slot (the host's slots in order), blueprint
(the topology's blueprints) and blend schedule. The op is sampled first, then the slot under the
mask for that op, so every sampled combination names a slot where the op can act. Masks call
the lifecycle's own gate functions, so the policy and the env can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from esper.kasmina.blueprints import Topology, blueprint_names, get_blueprint
from esper.kasmina.lifecycle import cull_gate, fossilize_gate, germinate_gate
from esper.leyline import BlendSchedule, Decision, GateThresholds, LifecycleOp, SlotSignals, TrainingSignals
from esper.tamiyo.distributions import FactoredMasks

HEADS: tuple[str, ...] = ("op", "slot", "blueprint", "schedule")


@dataclass(frozen=True)
class ActionSpace:
    """Head sizes and masks, derived from the host's slots and topology."""

    topology: Topology
    slot_names: tuple[str, ...]
    allowed_blueprints: tuple[str, ...] | None = None
    """Blueprints a controller may choose (default: all of the topology's)."""

    def __post_init__(self) -> None:
        for name in self.allowed_blueprints or ():
            get_blueprint(self.topology, name)

    @property
    def blueprints(self) -> tuple[str, ...]:
        """The blueprint head's order: every residual blueprint of the topology, then the width
        blueprints allowed (none by default: the head of every earlier policy), masked to the
        allowed ones."""
        residual = blueprint_names(self.topology)
        return residual + tuple(b for b in self.allowed_blueprints or () if b not in residual)

    @property
    def choosable_blueprints(self) -> tuple[str, ...]:
        """The blueprints the head may pick, in the head's order: the allowed ones."""
        allowed = set(self.allowed_blueprints or self.blueprints)
        return tuple(b for b in self.blueprints if b in allowed)

    @property
    def head_sizes(self) -> tuple[int, ...]:
        return (len(LifecycleOp), len(self.slot_names), len(self.blueprints), len(BlendSchedule))

    # ----------------------------------------------------------------- masks
    def slot_mask(self, op: LifecycleOp, signals: TrainingSignals, thresholds: GateThresholds) -> torch.Tensor:
        """Slots where `op` can act now. WAIT acts on no slot: its slot head is inactive, and the
        mask is all-True only so that the (ignored) distribution is well defined."""
        if op is LifecycleOp.WAIT:
            return torch.ones(len(self.slot_names), dtype=torch.bool)
        seeds_left = signals.seeds_germinated < signals.max_germinations
        return torch.tensor(
            [self._can_act(op, s, thresholds, seeds_left and self.can_grow_in(s)) for s in self._slots(signals)]
        )

    def can_grow_in(self, s: SlotSignals) -> bool:
        """Some allowed blueprint keeps the run within its compute budget in slot `s`."""
        return bool(self.blueprint_mask(s).any())

    def op_mask(self, signals: TrainingSignals, thresholds: GateThresholds) -> torch.Tensor:
        """Ops with at least one slot to act on; WAIT is always allowed."""
        return torch.tensor(
            [op is LifecycleOp.WAIT or bool(self.slot_mask(op, signals, thresholds).any()) for op in LifecycleOp]
        )

    def blueprint_mask(self, s: SlotSignals | None = None) -> torch.Tensor:
        """The blueprints the head may pick: the allowed ones, and to germinate in slot `s` only
        those that keep the run within its compute budget (`SlotSignals.affords`)."""
        allowed = self.choosable_blueprints
        return torch.tensor([b in allowed and (s is None or s.affords(b)) for b in self.blueprints])

    @staticmethod
    def head_active(op: LifecycleOp) -> torch.Tensor:
        """Which heads matter for `op`: the others contribute nothing to the loss or entropy."""
        return torch.tensor(
            [True, op is not LifecycleOp.WAIT, op is LifecycleOp.GERMINATE, op is LifecycleOp.GERMINATE]
        )

    def conditional_masks(
        self, signals: TrainingSignals, thresholds: GateThresholds
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The op mask (n_ops,), the slot mask per op (n_ops, n_slots), the blueprint mask per op
        and slot (n_ops, n_slots, n_blueprints: what fits a compute budget depends on the slot)
        and the schedule mask per op (n_ops, n_schedules): the form the PPO sampler takes
        (`esper.simic.FactoredMasks`)."""
        slot_table = torch.stack([self.slot_mask(op, signals, thresholds) for op in LifecycleOp])
        op_mask = slot_table.any(dim=1)
        op_mask[LifecycleOp.WAIT] = True
        n_ops, allowed = len(LifecycleOp), self.blueprint_mask()
        blueprints = allowed.expand(n_ops, len(self.slot_names), -1).clone()
        for i, s in enumerate(self._slots(signals)):
            fits = self.blueprint_mask(s)
            if fits.any():  # a slot where nothing fits is masked itself; its row is never read
                blueprints[LifecycleOp.GERMINATE, i] = fits
        schedules = torch.ones(n_ops, len(BlendSchedule), dtype=torch.bool)
        return op_mask, (slot_table, blueprints, schedules)

    def masks(self, signals: TrainingSignals, thresholds: GateThresholds) -> FactoredMasks:
        """The masks of one env's decision, as a batch of one row (what a single-env controller
        hands the sampler)."""
        first, conditional = self.conditional_masks(signals, thresholds)
        return FactoredMasks(
            first=first[None],
            conditional=tuple(mask[None] for mask in conditional),
            head_active=self.head_active_table(),
        )

    @classmethod
    def head_active_table(cls) -> torch.Tensor:
        """(n_ops, n_heads): `head_active` for every op."""
        return torch.stack([cls.head_active(op) for op in LifecycleOp])

    def decode(self, op: int, slot: int, blueprint: int, schedule: int) -> Decision:
        """The Decision named by one index per head; inactive heads are ignored."""
        lifecycle_op = LifecycleOp(op)
        if lifecycle_op is LifecycleOp.WAIT:
            return Decision.wait()
        if lifecycle_op is LifecycleOp.GERMINATE:
            return Decision(lifecycle_op, self.slot_names[slot], self.blueprints[blueprint], BlendSchedule(schedule))
        return Decision(lifecycle_op, self.slot_names[slot])

    def encode(self, decision: Decision) -> tuple[int, int, int, int]:
        """The index of each head that `decode` turns back into `decision` (inactive heads 0):
        how another controller's decisions become actions a policy can be taught."""
        op = decision.op
        slot = self.slot_names.index(decision.slot) if decision.slot is not None else 0
        if op is LifecycleOp.GERMINATE:
            assert decision.blueprint is not None
            return int(op), slot, self.blueprints.index(decision.blueprint), int(decision.schedule)
        return int(op), slot, 0, 0

    # ----------------------------------------------------------------- internals
    def _slots(self, signals: TrainingSignals) -> Sequence[SlotSignals]:
        names = tuple(s.name for s in signals.slots)
        if names != self.slot_names:
            raise ValueError(f"signals have slots {list(names)}, the action space has {list(self.slot_names)}")
        return signals.slots

    @staticmethod
    def _can_act(op: LifecycleOp, s: SlotSignals, thresholds: GateThresholds, may_germinate: bool) -> bool:
        """`may_germinate`: within the seed budget, and the compute budget allows it here."""
        if not s.enabled:
            return False
        if op is LifecycleOp.GERMINATE:
            return may_germinate and germinate_gate(s.stage).passed
        if op is LifecycleOp.FOSSILIZE:
            return fossilize_gate(s.stage, s.epochs_in_stage, s.contribution, thresholds).passed
        return cull_gate(s.stage).passed
