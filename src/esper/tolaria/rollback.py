"""The rollback keeper: an episode's last healthy state, and putting it back.

A step that the governor judges a panic, or that raises, is undone whole: the model (weights,
every slot's lifecycle and seed structure), the optimizers, and the seeds' counters and records,
whatever was germinated, culled or fossilized since.
"""

from __future__ import annotations

import math

from esper.kasmina import MorphogeneticModel
from esper.kasmina.optimizers import ModelOptimizers
from esper.tolaria.events import EnvEvents
from esper.tolaria.governor import Governor, Snapshot
from esper.tolaria.seeds import LifecycleExecutor, SlotChange
from esper.tolaria.training import TrainStats


class RollbackKeeper:
    """Holds one episode's parts and the governor that judges them."""

    def __init__(
        self,
        governor: Governor,
        model: MorphogeneticModel,
        optimizers: ModelOptimizers,
        seeds: LifecycleExecutor,
        events: EnvEvents,
    ) -> None:
        self.governor, self.model, self.optimizers, self.seeds, self.events = governor, model, optimizers, seeds, events

    def keep(self, train_loss: float | None) -> None:
        """The state as of now is healthy: keep it (`train_loss` joins the governor's history)."""
        self.governor.record_healthy(train_loss, self._snapshot())

    def amend(self) -> None:
        """A rollback changed the kept state (it culled a diverged seed): keep the change."""
        self.governor.amend_snapshot(self._snapshot())

    def restore(self) -> None:
        """Put model, lifecycles, optimizers, counters and seed records back as they were kept."""
        snapshot = self.governor.last_snapshot()
        self.model.load_state_dict(snapshot.model)
        self.optimizers.load_state_dict(snapshot.optimizers, self.model.host_parameters(), self.model.ordered_slots())
        self.seeds.restore_counters(snapshot.counters)

    def roll_back(self, reason: str) -> None:
        """Return to the last healthy epoch, and say in one event what was undone."""
        undone = self.events.discard()
        self.governor.count_rollback()
        self.restore()
        self.events.rollback(reason, undone)

    def cull_diverged(self, train: TrainStats, blended: set[str]) -> list[SlotChange]:
        """After a rollback, cull the seed to blame, if one can be named.

        Only a seed that was blended in the failed epoch can have caused it (a seed in TRAINING
        cannot change the model's output). The suspects are those whose parameters or gradients
        went non-finite. A diverging host spreads NaN into every seed's gradients, so when the
        host went non-finite too, the first rollback blames nobody; if it happens again, the most
        recently germinated suspect is culled, one per rollback.
        """
        suspects = []
        for slot in self.model.ordered_slots():
            name = slot.slot_id.name
            grad = train.seed_grad_norm.get(name)
            diverged = not train.seed_finite.get(name, True) or (grad is not None and not math.isfinite(grad))
            if diverged and name in blended and slot.lifecycle.is_live:
                suspects.append(name)
        if not train.host_finite:
            if self.governor.consecutive_rollbacks < 2 or not suspects:
                return []
            order = {r.seed_id: i for i, r in enumerate(self.seeds.records)}
            suspects = [max(suspects, key=lambda name: order[self.model.slot(name).seed_id])]
        changes: list[SlotChange] = []
        for name in suspects:
            changes += self.seeds.cull(name, "governor: seed diverged")
        return changes

    def _snapshot(self) -> Snapshot:
        """The episode's whole state as of now (the governor clones it)."""
        return Snapshot(self.model.state_dict(), self.optimizers.state_dict(), self.seeds.counters())
