"""Telemetry events and the hub that delivers them to backends off the training thread."""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO


@dataclass(frozen=True)
class Event:
    """One thing that happened: `kind` names it, `data` holds plain JSON values."""

    kind: str
    episode: int
    epoch: int
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)
    """Wall-clock seconds since the epoch when it happened (not when a backend wrote it)."""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "episode": self.episode, "epoch": self.epoch, "time": self.time, **self.data}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Event:
        """An `events.jsonl` line read back (the inverse of `to_json`), to replay it to a backend."""
        data = dict(record)
        kind, episode, epoch, when = data.pop("kind"), data.pop("episode"), data.pop("epoch"), data.pop("time")
        return cls(kind, episode, epoch, data, when)


ROUND_METRICS = "round_metrics"
"""The kind of a PPO round's metrics row (its data is the row, under CleanRL's names)."""


class Backend(Protocol):
    def write(self, event: Event) -> None: ...
    def close(self) -> None: ...


class TelemetryError(RuntimeError):
    """A backend failed; raised on the training thread at the next emit or at close."""


class JsonlBackend:
    """One JSON object per line, flushed per event so a crashed run still leaves its history.

    The run directory's two files of record: `events.jsonl` holds every event but the PPO rounds'
    rows, and `metrics.jsonl` (`rows_only=True`) holds those rows alone, each as the plain row."""

    def __init__(self, path: Path, rows_only: bool = False) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._rows_only = rows_only

    def write(self, event: Event) -> None:
        if (event.kind == ROUND_METRICS) != self._rows_only:
            return
        record = event.data if self._rows_only else event.to_json()
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class ConsoleBackend:
    """Human-readable progress: one line per epoch and per lifecycle event.

    `write_line` replaces printing to `stream` (a progress bar's own writer, so lines go above
    the bar instead of through it)."""

    def __init__(self, stream: TextIO | None = None, write_line: Callable[[str], None] | None = None) -> None:
        self._stream = stream or sys.stdout
        self._write_line = write_line

    def write(self, event: Event) -> None:
        line = format_event(event)
        if not line:
            return
        if self._write_line is not None:
            self._write_line(line)
        else:
            print(line, file=self._stream, flush=True)

    def close(self) -> None:
        pass


def format_event(event: Event) -> str | None:
    d = event.data
    where = f"[episode {event.episode} epoch {event.epoch:>3}]"
    if event.kind == "epoch":
        slots = " ".join(
            f"{s['slot']}:{s['stage'][:5]}" + (f"({s['blueprint']})" if s["blueprint"] else "") for s in d["slots"]
        )
        return (
            f"{where} train_loss {d['train_loss']:.3f} val_loss {d['val_loss']:.3f} "
            f"val_acc {d['val_accuracy']:5.1f}% | {slots}"
        )
    if event.kind == "stage_change":
        return f"{where} {d['slot']}: {d['seed_id']} {d['source']} -> {d['target']} ({d['reason']})"
    if event.kind == "governor_rollback":
        return f"{where} governor rollback: {d['reason']}"
    if event.kind == "episode_end":
        return (
            f"[episode {event.episode}] done: test_acc {d['final_test_accuracy']:.2f}% "
            f"(val_acc {d['final_val_accuracy']:.2f}%), "
            f"host {d['host_params']:,} + seeds {d['seed_params']:,} params, "
            f"{d['train_gflops']:,.0f} training GFLOPs, {d['seconds']:.1f}s"
        )
    return None


class TelemetryHub:
    """Queues events and writes them to every backend on one worker thread.

    A backend exception stops delivery and is re-raised as `TelemetryError` on the training
    thread at the next `emit` or at `close`, so a broken sink fails the run loudly.
    """

    def __init__(self, backends: list[Backend]) -> None:
        self._backends = backends
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._deliver, name="esper-telemetry", daemon=True)
        self._thread.start()

    def emit(self, event: Event) -> None:
        self._raise_if_failed()
        self._queue.put(event)

    def flush(self) -> None:
        """Wait until every event emitted so far is written (or a backend failed), and raise if
        one did: a checkpoint saved after this never outruns the rows it follows."""
        self._queue.join()
        self._raise_if_failed()

    def close(self) -> None:
        """Deliver everything queued, close the backends, and raise if any backend failed."""
        self._queue.put(None)
        self._thread.join()
        for backend in self._backends:
            try:
                backend.close()
            except Exception as exc:
                self._error = self._error or exc
        self._raise_if_failed()

    def _deliver(self) -> None:
        while (event := self._queue.get()) is not None:
            try:
                if self._error is None:
                    for backend in self._backends:
                        backend.write(event)
            except BaseException as exc:
                self._error = exc
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise TelemetryError(
                f"telemetry backend failed: {type(self._error).__name__}: {self._error}"
            ) from self._error
