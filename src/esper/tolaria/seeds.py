"""The seed-lifecycle executor: a controller's decisions carried out on a model's slots, every
slot's lifecycle ticked after an epoch, and the record of each seed's life.

The lifecycle gates are checked once, by the lifecycle operation itself (a controller's masks
call the same gate functions, so a decision they allow passes). This checks only what the env
owns: which slots are enabled, the germination budget and the blueprint's name. A refused
decision raises before the slot changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from esper.kasmina import GateInputs, GateRefused, MorphogeneticModel, StageChange
from esper.kasmina.optimizers import ModelOptimizers
from esper.leyline import Decision, InvalidDecision, LifecycleOp, SeedStage
from esper.tolaria.events import EnvClock, EnvEvents
from esper.tolaria.rng import draw_rng_seed, seeded_init
from esper.tolaria.training import TrainStats, ValidationStats

SlotChange = tuple[str, StageChange]
"""(slot, change): one lifecycle transition of one slot."""


@dataclass
class SeedRecord:
    """The life of one seed, for reports."""

    seed_id: str
    slot: str
    blueprint: str
    schedule: str
    param_count: int
    stage_history: list[tuple[int, str]]
    cull_reason: str | None = None
    """Why the seed was culled (the gate's rule with its reading, or the controller), when it
    was: an episode's record tells a cull on a contribution reading from a controller's choice."""

    @property
    def final_stage(self) -> str:
        return self.stage_history[-1][1]

    @classmethod
    def from_json(cls, data: dict) -> SeedRecord:
        return cls(
            data["seed_id"],
            data["slot"],
            data["blueprint"],
            data["schedule"],
            int(data["param_count"]),
            [(int(epoch), str(stage)) for epoch, stage in data["stage_history"]],
            data.get("cull_reason"),  # absent from records saved before 2026-11-28
        )

    def to_json(self) -> dict[str, object]:
        return {
            "seed_id": self.seed_id,
            "slot": self.slot,
            "blueprint": self.blueprint,
            "schedule": self.schedule,
            "param_count": self.param_count,
            "stage_history": [list(p) for p in self.stage_history],
            "final_stage": self.final_stage,
            "cull_reason": self.cull_reason,
        }


class LifecycleExecutor:
    """One episode's seeds: executes decisions, ticks lifecycles, keeps records and counters."""

    def __init__(
        self,
        model: MorphogeneticModel,
        optimizers: ModelOptimizers,
        events: EnvEvents,
        enabled_slots: tuple[str, ...],
        max_germinations: int,
        init_rng: torch.Generator,
        seed_numbers: Iterator[int],
    ) -> None:
        """`init_rng` builds each new seed; `seed_numbers` numbers them over the env's lifetime, so
        seed ids never repeat within an env."""
        self.model, self.optimizers, self.events = model, optimizers, events
        self.enabled_slots, self.max_germinations = enabled_slots, max_germinations
        self.init_rng, self.seed_numbers = init_rng, seed_numbers
        self.records: list[SeedRecord] = []
        self.live: dict[str, SeedRecord] = {}
        self.germinated = 0
        self.last_germination_epoch: int | None = None

    @property
    def clock(self) -> EnvClock:
        return self.events.clock

    # ----------------------------------------------------------------- decisions
    def check(self, decision: Decision) -> None:
        """Refuse what the env forbids: a slot it has not enabled, a spent budget, an unknown
        blueprint or one the slot cannot take."""
        if decision.op is LifecycleOp.WAIT:
            return
        if decision.slot not in self.enabled_slots:
            enabled = " ".join(self.enabled_slots)
            raise InvalidDecision(f"{decision!r}: slot {decision.slot!r} is not enabled (enabled: {enabled})")
        if decision.op is LifecycleOp.GERMINATE:
            assert decision.blueprint is not None  # Decision guarantees one for GERMINATE
            try:
                self.model.slot(decision.slot).seed_param_count(decision.blueprint)
            except ValueError as exc:
                raise InvalidDecision(f"{decision!r}: {exc}") from None
            if self.germinated >= self.max_germinations:
                raise GateRefused(f"G0: seed budget of {self.max_germinations} germinations is spent")

    def execute(self, decision: Decision, last: ValidationStats) -> list[SlotChange]:
        """Carry out a checked decision; `last` holds the contributions measured after the previous
        epoch, which G4 reads."""
        if decision.op is LifecycleOp.WAIT:
            return []
        name = decision.slot
        assert name is not None  # Decision guarantees a slot for every op but WAIT
        slot = self.model.slot(name)
        if decision.op is LifecycleOp.FOSSILIZE:
            return self.fossilize(name, last.contribution(name))
        if decision.op is LifecycleOp.CULL:
            return self.cull(name, decision.reason or "culled by controller")
        assert decision.blueprint is not None
        seed_id = f"seed-{next(self.seed_numbers)}"
        with seeded_init(draw_rng_seed(self.init_rng)):
            changes = slot.germinate(decision.blueprint, seed_id, decision.schedule)
        self.germinated += 1
        self.last_germination_epoch = self.clock.epoch
        record = SeedRecord(seed_id, name, decision.blueprint, decision.schedule.name.lower(), slot.param_count(), [])
        self.records.append(record)
        self.live[name] = record
        if slot.seed is not None:
            self.optimizers.add_seed(name, slot.seed.parameters())
        return self._log(name, changes)

    def seed_epochs(self) -> dict[str, int]:
        """Each live seed's 1-based epoch of life by slot (1: the epoch it was germinated in),
        read from its record, which rollbacks and resumes restore."""
        return {slot: self.clock.epoch - record.stage_history[0][0] + 1 for slot, record in self.live.items()}

    def fossilize(self, name: str, contribution: float | None) -> list[SlotChange]:
        """G4; a width seed is then merged into the host, its optimizer state with it."""
        slot = self.model.slot(name)
        changes = self._log(name, [slot.fossilize(contribution)])
        if slot.holds_width_seed:
            self.optimizers.merge_seed(name, self.model.merge_width_seed(name))
        return changes

    def cull(self, name: str, reason: str) -> list[SlotChange]:
        changes = self._log(name, [self.model.slot(name).cull(reason)])
        self.optimizers.drop_seed(name)
        return changes

    # ----------------------------------------------------------------- after an epoch
    def tick(self, train: TrainStats, val: ValidationStats) -> list[SlotChange]:
        """Every slot's lifecycle advances one epoch on this epoch's gate inputs."""
        changes: list[SlotChange] = []
        for slot in self.model.ordered_slots():
            name = slot.slot_id.name
            grad = train.seed_grad_norm.get(name)
            finite = train.seed_finite.get(name, True) and (grad is None or math.isfinite(grad))
            changes += self._log(name, slot.tick(GateInputs(val.contribution(name), grad, finite)))
        self.optimizers.drop_missing(self.model.ordered_slots())
        return changes

    # ----------------------------------------------------------------- snapshots
    def counters(self) -> dict:
        """What a rollback must put back, beyond the model and the optimizers."""
        return {
            "germinated": self.germinated,
            "last_germination_epoch": self.last_germination_epoch,
            "records": len(self.records),
            "history_lengths": {r.seed_id: len(r.stage_history) for r in self.records},
            "live": {slot: r.seed_id for slot, r in self.live.items()},
        }

    def restore_counters(self, counters: dict) -> None:
        self.germinated = counters["germinated"]
        self.last_germination_epoch = counters["last_germination_epoch"]
        del self.records[counters["records"] :]
        for record in self.records:
            del record.stage_history[counters["history_lengths"][record.seed_id] :]
            if not record.stage_history or record.final_stage != SeedStage.CULLED.name:
                record.cull_reason = None  # the rollback undid the cull
        by_id = {r.seed_id: r for r in self.records}
        self.live = {slot: by_id[seed_id] for slot, seed_id in counters["live"].items()}

    def _log(self, slot: str, changes: list[StageChange]) -> list[SlotChange]:
        """Each change joins the seed's record and the held events; a cull closes the record."""
        record = self.live.get(slot)
        for change in changes:
            if record is not None:
                record.stage_history.append((self.clock.epoch, change.target.name))
            self.events.stage_change(
                slot, record.seed_id if record else None, record.blueprint if record else None, change
            )
            if change.target is SeedStage.CULLED:
                if record is not None:
                    record.cull_reason = change.reason
                self.live.pop(slot, None)
                record = None
        return [(slot, c) for c in changes]
