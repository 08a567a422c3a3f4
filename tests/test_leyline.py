"""Leyline contracts: the stage transition table, controller decisions and slot identity."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import enum_name
from esper.leyline import (
    LIVE_STAGES,
    SEED_BEARING_STAGES,
    TRANSITIONS,
    BlendSchedule,
    Decision,
    InvalidDecision,
    InvalidTransition,
    LifecycleOp,
    SeedStage,
    SlotId,
    check_transition,
    parse_slots,
)
from esper.leyline.slots import CANONICAL_SLOT_NAMES, slot_names_for

S = SeedStage


ALL_PAIRS = list(itertools.product(S, S))
ALLOWED = [(a, b) for a, b in ALL_PAIRS if b in TRANSITIONS[a]]
FORBIDDEN = [(a, b) for a, b in ALL_PAIRS if b not in TRANSITIONS[a]]


def pair_id(pair: tuple[SeedStage, SeedStage]) -> str:
    return f"{pair[0].name}->{pair[1].name}"


# --------------------------------------------------------------------------- stages
def test_stage_values_are_stable() -> None:
    """Stage integers are written to checkpoints and events; they must never move."""
    assert [(s.name, int(s)) for s in S] == [
        ("DORMANT", 0),
        ("GERMINATED", 1),
        ("TRAINING", 2),
        ("BLENDING", 3),
        ("PROBATIONARY", 4),
        ("FOSSILIZED", 5),
        ("CULLED", 6),
        ("EMBARGOED", 7),
        ("RESETTING", 8),
    ]


def test_transition_table_covers_every_stage_and_has_no_self_loops() -> None:
    assert set(TRANSITIONS) == set(S)
    assert all(s not in TRANSITIONS[s] for s in S)
    assert len(ALLOWED) == 12


def test_live_and_seed_bearing_stages() -> None:
    assert {S.GERMINATED, S.TRAINING, S.BLENDING, S.PROBATIONARY} == LIVE_STAGES
    assert LIVE_STAGES | {S.FOSSILIZED} == SEED_BEARING_STAGES
    # Every live stage can be culled; nothing else can.
    assert {s for s in S if S.CULLED in TRANSITIONS[s]} == LIVE_STAGES


@pytest.mark.parametrize("pair", ALLOWED, ids=pair_id)
def test_check_transition_accepts_every_listed_pair(pair: tuple[SeedStage, SeedStage]) -> None:
    assert check_transition(*pair) is None


@pytest.mark.parametrize("pair", FORBIDDEN, ids=pair_id)
def test_check_transition_rejects_every_unlisted_pair(pair: tuple[SeedStage, SeedStage]) -> None:
    source, target = pair
    with pytest.raises(InvalidTransition) as info:
        check_transition(source, target)
    message = str(info.value)
    assert f"{source.name} -> {target.name}" in message
    allowed = TRANSITIONS[source]
    if allowed:
        assert all(s.name in message for s in allowed)
    else:
        assert "terminal" in message


def test_allowed_and_forbidden_pairs_partition_all_pairs() -> None:
    assert len(ALLOWED) + len(FORBIDDEN) == len(S) ** 2


# --------------------------------------------------------------------------- decisions
@pytest.mark.parametrize(
    "kwargs",
    [{"slot": "early"}, {"blueprint": "conv"}, {"slot": "early", "blueprint": "conv"}],
    ids=repr,
)
def test_wait_with_slot_or_blueprint_is_invalid(kwargs: dict[str, str]) -> None:
    with pytest.raises(InvalidDecision):
        Decision(LifecycleOp.WAIT, **kwargs)


NON_WAIT_OPS = [op for op in LifecycleOp if op is not LifecycleOp.WAIT]


@pytest.mark.parametrize("op", NON_WAIT_OPS, ids=enum_name)
def test_non_wait_without_slot_is_invalid(op: LifecycleOp) -> None:
    blueprint = "conv" if op is LifecycleOp.GERMINATE else None
    with pytest.raises(InvalidDecision, match=op.name):
        Decision(op, blueprint=blueprint)


def test_germinate_without_blueprint_is_invalid() -> None:
    with pytest.raises(InvalidDecision):
        Decision(LifecycleOp.GERMINATE, slot="mid")


@pytest.mark.parametrize("op", [LifecycleOp.FOSSILIZE, LifecycleOp.CULL], ids=enum_name)
def test_fossilize_or_cull_with_blueprint_is_invalid(op: LifecycleOp) -> None:
    with pytest.raises(InvalidDecision):
        Decision(op, slot="mid", blueprint="conv")


def test_invalid_decision_is_a_value_error() -> None:
    assert issubclass(InvalidDecision, ValueError)


def test_valid_decisions_keep_their_fields() -> None:
    d = Decision(LifecycleOp.GERMINATE, "late", "attention", BlendSchedule.SIGMOID, "why")
    assert (d.op, d.slot, d.blueprint, d.schedule, d.reason) == (
        LifecycleOp.GERMINATE,
        "late",
        "attention",
        BlendSchedule.SIGMOID,
        "why",
    )
    assert repr(d) == "Decision(GERMINATE late attention sigmoid)"
    assert repr(Decision(LifecycleOp.CULL, "mid")) == "Decision(CULL mid)"
    w = Decision.wait("nothing to do")
    assert (w.op, w.slot, w.blueprint, w.reason) == (LifecycleOp.WAIT, None, None, "nothing to do")
    assert repr(w) == "Decision(WAIT)"


def test_decision_equality_and_hash_ignore_reason() -> None:
    a = Decision(LifecycleOp.GERMINATE, "mid", "conv", BlendSchedule.LINEAR, reason="one")
    b = Decision(LifecycleOp.GERMINATE, "mid", "conv", BlendSchedule.LINEAR, reason="two")
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert Decision.wait() == Decision(LifecycleOp.WAIT)
    assert hash(Decision.wait("x")) == hash(Decision(LifecycleOp.WAIT))


@pytest.mark.parametrize(
    "other",
    [
        Decision(LifecycleOp.GERMINATE, "late", "conv"),
        Decision(LifecycleOp.GERMINATE, "mid", "attention"),
        Decision(LifecycleOp.GERMINATE, "mid", "conv", BlendSchedule.SIGMOID),
        Decision(LifecycleOp.CULL, "mid"),
        Decision.wait(),
    ],
    ids=repr,
)
def test_decisions_differing_in_any_field_are_unequal(other: Decision) -> None:
    base = Decision(LifecycleOp.GERMINATE, "mid", "conv", BlendSchedule.LINEAR)
    assert base != other and other != base
    assert len({base, other}) == 2


def test_decision_not_equal_to_other_types() -> None:
    assert Decision.wait() != "WAIT"
    assert Decision.wait() != LifecycleOp.WAIT


# --------------------------------------------------------------------------- slots
def test_slot_names_for_uses_canonical_names_then_positional() -> None:
    assert CANONICAL_SLOT_NAMES == ("early", "mid", "late")
    assert slot_names_for(1) == ("early",)
    assert slot_names_for(2) == ("early", "mid")
    assert slot_names_for(3) == ("early", "mid", "late")
    assert slot_names_for(6) == ("early", "mid", "late", "s3", "s4", "s5")


@pytest.mark.parametrize("n", [0, -1])
def test_slot_names_for_rejects_hosts_without_slots(n: int) -> None:
    with pytest.raises(ValueError, match=str(n)):
        slot_names_for(n)


@given(n=st.integers(1, 40))
def test_slot_names_are_unique_and_extend_shorter_hosts(n: int) -> None:
    names = slot_names_for(n)
    assert len(names) == len(set(names)) == n
    assert names[0] == "early"
    if n > 1:
        assert names[:-1] == slot_names_for(n - 1)


def host_slots(n: int) -> tuple[SlotId, ...]:
    return tuple(SlotId(i, name) for i, name in enumerate(slot_names_for(n)))


@settings(max_examples=100)
@given(data=st.data(), n=st.integers(1, 8))
def test_parse_slots_returns_host_order_whatever_the_request_order(data: st.DataObject, n: int) -> None:
    available = host_slots(n)
    names = [s.name for s in available]
    order = data.draw(st.permutations(names))
    requested = order[: data.draw(st.integers(0, n))]
    chosen = parse_slots(requested, available)
    assert [s.name for s in chosen] == [name for name in names if name in requested]
    assert [s.index for s in chosen] == sorted(s.index for s in chosen)
    # The order in which the host lists its slots does not matter either: index decides.
    assert parse_slots(tuple(requested), tuple(reversed(available))) == chosen


def test_parse_slots_example() -> None:
    available = host_slots(3)
    assert parse_slots(["late", "early"], available) == (available[0], available[2])
    assert parse_slots([], available) == ()


@pytest.mark.parametrize("bad", ["middle", "EARLY", "", "s3"])
def test_parse_slots_unknown_name_lists_the_valid_choices(bad: str) -> None:
    available = host_slots(3)
    with pytest.raises(ValueError) as info:
        parse_slots(["early", bad], available)
    message = str(info.value)
    assert repr(bad) in message
    assert all(s.name in message for s in available)


@pytest.mark.parametrize("requested", [["mid", "mid"], ["early", "late", "early"]], ids=repr)
def test_parse_slots_rejects_duplicates(requested: list[str]) -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_slots(requested, host_slots(3))


def test_slot_id_orders_by_index_not_name() -> None:
    early, mid, late = host_slots(3)
    assert early < mid < late
    assert sorted([late, early, mid]) == [early, mid, late]
    assert SlotId(0, "zzz") < SlotId(1, "aaa")
    assert str(mid) == "mid"


@given(indices=st.lists(st.integers(0, 100), unique=True, max_size=10))
def test_slot_id_sorting_follows_index(indices: list[int]) -> None:
    # Names chosen so that name order is the reverse of index order.
    ids = [SlotId(i, f"n{1000 - i:04d}") for i in indices]
    assert [s.index for s in sorted(ids)] == sorted(indices)


def test_slot_id_is_frozen_and_hashable() -> None:
    slot = SlotId(1, "mid")
    with pytest.raises(AttributeError):
        slot.index = 2  # type: ignore[misc]
    assert {slot, SlotId(1, "mid")} == {slot}
