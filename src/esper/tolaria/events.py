"""What an env tells telemetry: its epochs, its seeds' stage changes, its rollbacks.

Stage changes are held until their epoch is judged: a rollback undoes them, and then they are
reported once, inside the rollback event, never as changes that happened.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from esper.kasmina import StageChange
from esper.leyline import Decision, TrainingSignals
from esper.nissa import Event


@dataclass
class EnvClock:
    """Where an env is: the episode and the epoch its current step trains (0 before the first)."""

    episode: int = -1
    epoch: int = 0


@dataclass
class EnvEvents:
    emit: Callable[[Event], None]
    clock: EnvClock
    pending: list[Event] = field(default_factory=list)

    def stage_change(self, slot: str, seed_id: str | None, blueprint: str | None, change: StageChange) -> None:
        data = {
            "slot": slot,
            "seed_id": seed_id,
            "blueprint": blueprint,
            "source": change.source.name,
            "target": change.target.name,
            "reason": change.reason,
        }
        self.pending.append(Event("stage_change", self.clock.episode, self.clock.epoch, data))

    def flush(self) -> None:
        """Emit the held stage changes: their epoch was judged healthy (or they survived a rollback)."""
        for event in self.pending:
            self.emit(event)
        self.pending.clear()

    def discard(self) -> list[dict]:
        """Drop the held stage changes (their epoch was undone) and return what they said."""
        undone = [event.data for event in self.pending]
        self.pending.clear()
        return undone

    def rollback(self, reason: str, undone: list[dict]) -> None:
        self.emit(
            Event("governor_rollback", self.clock.episode, self.clock.epoch, {"reason": reason, "undone": undone})
        )

    def epoch(self, signals: TrainingSignals, decision: Decision) -> None:
        slots = [
            {
                "slot": s.name,
                "stage": s.stage.name,
                "alpha": s.alpha,
                "blueprint": s.blueprint,
                "seed_id": s.seed_id,
                "contribution": s.contribution,
                "grad_norm": s.grad_norm,
            }
            for s in signals.slots
        ]
        data = {
            "decision": decision.to_json(),
            "train_loss": signals.train_loss,
            "train_accuracy": signals.train_accuracy,
            "val_loss": signals.val_loss,
            "val_accuracy": signals.val_accuracy,
            "plateau_epochs": signals.plateau_epochs,
            "host_params": signals.host_params,
            "seed_params": signals.seed_params,
            "slots": slots,
        }
        self.emit(Event("epoch", self.clock.episode, signals.epoch, data))
