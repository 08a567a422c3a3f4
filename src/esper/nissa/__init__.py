"""Nissa: telemetry. Events, a hub that fans them out to backends on a worker thread, and the
backends (JSON lines files, console progress, TensorBoard in `esper.nissa.tensorboard`).
Telemetry is a sink: training never reads it back, and a backend that fails makes the run exit
non-zero instead of going quiet."""

from esper.nissa.telemetry import ROUND_METRICS, ConsoleBackend, Event, JsonlBackend, TelemetryError, TelemetryHub

__all__ = ["ROUND_METRICS", "ConsoleBackend", "Event", "JsonlBackend", "TelemetryError", "TelemetryHub"]
