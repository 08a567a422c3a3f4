"""Lifecycle operations a controller can ask for, and the alpha schedules of blending."""

from __future__ import annotations

from enum import IntEnum


class LifecycleOp(IntEnum):
    """What a controller does to one slot in one step. Values are stable action indices."""

    WAIT = 0
    GERMINATE = 1
    FOSSILIZE = 2
    CULL = 3


class BlendSchedule(IntEnum):
    """How alpha rises from 0 to 1 over the blending epochs. Chosen at germination."""

    LINEAR = 0
    SIGMOID = 1


class InvalidDecision(ValueError):
    """A decision whose fields do not fit its op (a controller bug, caught before execution)."""


class Decision:
    """One controller decision for one env step: an op, the slot it acts on, and for GERMINATE
    the blueprint and blend schedule. WAIT acts on no slot."""

    __slots__ = ("blueprint", "op", "reason", "schedule", "slot")

    def __init__(
        self,
        op: LifecycleOp,
        slot: str | None = None,
        blueprint: str | None = None,
        schedule: BlendSchedule = BlendSchedule.LINEAR,
        reason: str = "",
    ) -> None:
        op, schedule = LifecycleOp(op), BlendSchedule(schedule)
        if op is LifecycleOp.WAIT and (slot is not None or blueprint is not None):
            raise InvalidDecision("WAIT names no slot and no blueprint")
        if op is not LifecycleOp.WAIT and slot is None:
            raise InvalidDecision(f"{op.name} must name a slot")
        if (op is LifecycleOp.GERMINATE) != (blueprint is not None):
            raise InvalidDecision("a blueprint is named by GERMINATE and only by GERMINATE")
        self.op, self.slot, self.blueprint, self.schedule, self.reason = op, slot, blueprint, schedule, reason

    @classmethod
    def wait(cls, reason: str = "") -> Decision:
        return cls(LifecycleOp.WAIT, reason=reason)

    def to_json(self) -> dict[str, str | None]:
        """The decision as plain fields, so run files can be filtered by op or slot without parsing."""
        schedule = self.schedule.name.lower() if self.op is LifecycleOp.GERMINATE else None
        return {
            "op": self.op.name,
            "slot": self.slot,
            "blueprint": self.blueprint,
            "schedule": schedule,
            "reason": self.reason,
        }

    def __repr__(self) -> str:
        parts = [self.op.name] + [p for p in (self.slot, self.blueprint) if p is not None]
        if self.op is LifecycleOp.GERMINATE:
            parts.append(self.schedule.name.lower())
        return f"Decision({' '.join(parts)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Decision):
            return NotImplemented
        return (self.op, self.slot, self.blueprint, self.schedule) == (
            other.op,
            other.slot,
            other.blueprint,
            other.schedule,
        )

    def __hash__(self) -> int:
        return hash((self.op, self.slot, self.blueprint, self.schedule))
