"""Slot identity: the one name a slot has everywhere (masks, features, loops, reports)."""

from __future__ import annotations

from dataclasses import dataclass

CANONICAL_SLOT_NAMES: tuple[str, ...] = ("early", "mid", "late")
"""Names of the first three slots of every host, in host order. Deeper hosts continue with
`s3`, `s4`, ... so that a name always says where the slot sits."""


def slot_names_for(n_slots: int) -> tuple[str, ...]:
    """The ordered slot names of a host with `n_slots` insertion points."""
    if n_slots < 1:
        raise ValueError(f"a host needs at least one slot, got {n_slots}")
    names = CANONICAL_SLOT_NAMES[:n_slots]
    return names + tuple(f"s{i}" for i in range(len(names), n_slots))


@dataclass(frozen=True, order=True)
class SlotId:
    """A slot's position in host order and its name. Ordering follows the host, never a dict."""

    index: int
    name: str

    def __str__(self) -> str:
        return self.name


def parse_slots(requested: list[str] | tuple[str, ...], available: tuple[SlotId, ...]) -> tuple[SlotId, ...]:
    """Resolve slot names against a host's slots, returned in host order.

    Raises `ValueError` naming the bad value and the valid choices, or a duplicate.
    """
    by_name = {s.name: s for s in available}
    chosen: list[SlotId] = []
    for name in requested:
        if name not in by_name:
            valid = " ".join(s.name for s in available)
            raise ValueError(f"unknown slot {name!r}; this host's slots are: {valid}")
        if by_name[name] in chosen:
            raise ValueError(f"slot {name!r} given twice")
        chosen.append(by_name[name])
    return tuple(sorted(chosen))
