"""The governor: keeps the last healthy state of an env and rolls back to it on a blow-up."""

from __future__ import annotations

import copy
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class GovernorConfig:
    """When the governor rolls an env back, and when it gives up on an episode."""

    blowup_factor: float = 3.0
    """A training loss above this multiple of the recent mean is a blow-up."""
    history: int = 5
    """How many recent healthy epoch losses form that mean."""
    min_history: int = 2
    """Blow-ups are judged only once this many healthy epochs are known; NaN/Inf always are."""
    max_consecutive_rollbacks: int = 3
    """After this many rollbacks in a row the env gives up and ends the episode."""

    def __post_init__(self) -> None:
        if not self.blowup_factor > 1.0:
            raise ValueError(f"blowup_factor must be > 1 (a multiple of the mean loss), got {self.blowup_factor}")
        for name in ("history", "min_history", "max_consecutive_rollbacks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.min_history > self.history:
            raise ValueError(f"min_history must be <= history, got {self.min_history} > {self.history}")


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return copy.deepcopy(value)


def _clone_snapshot(snapshot: Snapshot) -> Snapshot:
    return Snapshot(_clone(snapshot.model), _clone(snapshot.optimizers), copy.deepcopy(snapshot.counters))


@dataclass
class Snapshot:
    """Everything needed to put an env back: the model state dict (slot lifecycles and seed
    structure included), the state of every optimizer by name, and the env's own counters."""

    model: dict[str, Any]
    optimizers: dict[str, dict[str, Any]]
    counters: dict[str, Any]


class Governor:
    """Judges each epoch's losses and holds a snapshot of the last healthy epoch."""

    def __init__(self, config: GovernorConfig | None = None) -> None:
        self.config = config or GovernorConfig()
        self._losses: deque[float] = deque(maxlen=self.config.history)
        self._snapshot: Snapshot | None = None
        self.rollbacks = 0
        self.consecutive_rollbacks = 0

    def reset(self) -> None:
        self._losses.clear()
        self._snapshot = None
        self.rollbacks = 0
        self.consecutive_rollbacks = 0

    @property
    def gave_up(self) -> bool:
        return self.consecutive_rollbacks >= self.config.max_consecutive_rollbacks

    def judge(self, train_loss: float, val_loss: float) -> str | None:
        """The reason this epoch is a panic, or None when it is healthy."""
        if not (math.isfinite(train_loss) and math.isfinite(val_loss)):
            return f"non-finite loss (train {train_loss}, validation {val_loss})"
        if len(self._losses) >= self.config.min_history:
            reference = sum(self._losses) / len(self._losses)
            if train_loss > self.config.blowup_factor * reference:
                factor = self.config.blowup_factor
                return f"loss blow-up: train loss {train_loss:.4g} > {factor} x recent mean {reference:.4g}"
        return None

    def record_healthy(self, train_loss: float | None, snapshot: Snapshot) -> None:
        """Keep `snapshot` as the state to return to. `train_loss` joins the recent history that
        blow-ups are judged against (None at reset: an untrained model's loss is no reference)."""
        if train_loss is not None:
            self._losses.append(train_loss)
        self.consecutive_rollbacks = 0
        self._snapshot = _clone_snapshot(snapshot)

    def amend_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the kept state after a rollback changed it (a diverged seed was culled), so a
        following rollback keeps the change. Loss history and rollback count are untouched."""
        self._snapshot = _clone_snapshot(snapshot)

    def last_snapshot(self) -> Snapshot:
        """A copy of the kept state: restoring must not let later steps write into it."""
        if self._snapshot is None:
            raise RuntimeError("the governor has no healthy snapshot to roll back to")
        return _clone_snapshot(self._snapshot)

    def count_rollback(self) -> None:
        self.rollbacks += 1
        self.consecutive_rollbacks += 1
