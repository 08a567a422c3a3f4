"""Nissa: telemetry. Events, a hub that fans them out to backends on a worker thread, and the
backends (JSON lines file, console progress). Telemetry is a sink: training never reads it back,
and a backend that fails makes the run exit non-zero instead of going quiet."""

from esper.nissa.telemetry import ConsoleBackend, Event, JsonlBackend, TelemetryError, TelemetryHub

__all__ = ["ConsoleBackend", "Event", "JsonlBackend", "TelemetryError", "TelemetryHub"]
