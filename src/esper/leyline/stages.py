"""Seed stages and the one table of transitions between them."""

from __future__ import annotations

from enum import IntEnum


class SeedStage(IntEnum):
    """Where a slot's seed is in its life.

    The integer values are stable: they are written to events and checkpoints and will index
    the stage one-hot of a policy's observation.
    """

    DORMANT = 0  # empty slot, ready for a seed
    GERMINATED = 1  # seed module built, not yet trained
    TRAINING = 2  # seed learns from the task loss; the model output is the host's (straight-through)
    BLENDING = 3  # seed output is mixed in with a rising alpha
    PROBATIONARY = 4  # fully blended (alpha 1); must prove a positive contribution
    FOSSILIZED = 5  # permanently part of the model
    CULLED = 6  # removed; its module is gone
    EMBARGOED = 7  # slot rests before it may take a new seed
    RESETTING = 8  # slot is being cleared back to DORMANT


LIVE_STAGES: frozenset[SeedStage] = frozenset(
    {SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY}
)
"""Stages a seed can be culled from."""

SEED_BEARING_STAGES: frozenset[SeedStage] = LIVE_STAGES | {SeedStage.FOSSILIZED}
"""Stages in which the slot holds a seed module."""

TRANSITIONS: dict[SeedStage, frozenset[SeedStage]] = {
    SeedStage.DORMANT: frozenset({SeedStage.GERMINATED}),
    SeedStage.GERMINATED: frozenset({SeedStage.TRAINING, SeedStage.CULLED}),
    SeedStage.TRAINING: frozenset({SeedStage.BLENDING, SeedStage.CULLED}),
    SeedStage.BLENDING: frozenset({SeedStage.PROBATIONARY, SeedStage.CULLED}),
    SeedStage.PROBATIONARY: frozenset({SeedStage.FOSSILIZED, SeedStage.CULLED}),
    SeedStage.FOSSILIZED: frozenset(),
    SeedStage.CULLED: frozenset({SeedStage.EMBARGOED}),
    SeedStage.EMBARGOED: frozenset({SeedStage.RESETTING}),
    SeedStage.RESETTING: frozenset({SeedStage.DORMANT}),
}
"""Every allowed stage change. Anything not listed here is a bug, and raises."""


class InvalidTransition(RuntimeError):
    """A stage change that the lifecycle table does not allow."""


def check_transition(current: SeedStage, target: SeedStage) -> None:
    """Raise `InvalidTransition` unless `current -> target` is in `TRANSITIONS`."""
    if target not in TRANSITIONS[current]:
        allowed = ", ".join(s.name for s in sorted(TRANSITIONS[current])) or "none (terminal)"
        raise InvalidTransition(f"{current.name} -> {target.name} is not allowed; from {current.name}: {allowed}")
