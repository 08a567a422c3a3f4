"""Nissa telemetry: ordered delivery, loud failures, console formatting."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest

from esper.nissa import ROUND_METRICS, ConsoleBackend, Event, JsonlBackend, TelemetryError, TelemetryHub
from esper.nissa.telemetry import format_event


class ListBackend:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.closed = 0

    def write(self, event: Event) -> None:
        self.events.append(event)

    def close(self) -> None:
        self.closed += 1


class FailingBackend:
    """Raises on the `fail_at`-th write (0-based); records what it was given before that."""

    def __init__(self, fail_at: int = 0) -> None:
        self.fail_at = fail_at
        self.seen: list[Event] = []
        self.failed = threading.Event()

    def write(self, event: Event) -> None:
        if len(self.seen) == self.fail_at:
            self.failed.set()
            raise OSError("disk full")
        self.seen.append(event)

    def close(self) -> None:
        pass


class FailingClose(ListBackend):
    def close(self) -> None:
        raise OSError("cannot flush")


def epoch_event(epoch: int, episode: int = 0, **extra) -> Event:
    data = {
        "train_loss": 1.23456,
        "val_loss": 0.98765,
        "val_accuracy": 45.678,
        "slots": [
            {"slot": "early", "stage": "TRAINING", "blueprint": "conv_light"},
            {"slot": "mid", "stage": "DORMANT", "blueprint": None},
        ],
    }
    data.update(extra)
    return Event("epoch", episode, epoch, data)


def test_event_to_json() -> None:
    event = Event("stage_change", 2, 7, {"slot": "mid", "target": "BLENDING"}, time=1700000000.5)
    assert event.to_json() == {
        "kind": "stage_change",
        "episode": 2,
        "epoch": 7,
        "time": 1700000000.5,
        "slot": "mid",
        "target": "BLENDING",
    }
    assert Event("x", 0, 0, time=1.0).to_json() == {"kind": "x", "episode": 0, "epoch": 0, "time": 1.0}


def test_events_carry_the_wall_clock_time_they_happened() -> None:
    before = time.time()
    event = Event("x", 0, 0)
    assert before <= event.time <= time.time()
    assert json.loads(json.dumps(event.to_json())) == event.to_json()


def test_hub_delivers_in_order_to_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    listing = ListBackend()
    hub = TelemetryHub([JsonlBackend(path), listing])
    events = [epoch_event(i, episode=i // 10, note=f"n{i}") for i in range(40)]
    for event in events:
        hub.emit(event)
    hub.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 40
    decoded = [json.loads(line) for line in lines]  # one JSON object per line
    assert decoded == [e.to_json() for e in events]
    assert listing.events == events
    assert listing.closed == 1


def test_jsonl_backend_appends_and_flushes_per_event(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"kind": "earlier"}\n', encoding="utf-8")
    backend = JsonlBackend(path)
    backend.write(Event("epoch", 0, 1, {"val_accuracy": 10.0}))
    # visible before close: a crashed run still leaves its history
    assert [json.loads(x)["kind"] for x in path.read_text().splitlines()] == ["earlier", "epoch"]
    backend.close()


def test_failing_write_makes_a_later_emit_raise() -> None:
    bad = FailingBackend(fail_at=1)
    good = ListBackend()
    hub = TelemetryHub([good, bad])
    hub.emit(epoch_event(1))
    hub.emit(epoch_event(2))  # this one fails on the worker thread
    assert bad.failed.wait(5.0)
    deadline = time.monotonic() + 5.0
    with pytest.raises(TelemetryError, match="disk full"):
        while time.monotonic() < deadline:
            hub.emit(epoch_event(99))
            time.sleep(0.01)
    with pytest.raises(TelemetryError):
        hub.close()
    # delivery stopped at the failure: nothing after it reached any backend
    assert [e.epoch for e in good.events] == [1, 2]
    assert [e.epoch for e in bad.seen] == [1]


def test_failing_write_makes_close_raise() -> None:
    bad = FailingBackend(fail_at=0)
    hub = TelemetryHub([bad])
    hub.emit(epoch_event(1))
    with pytest.raises(TelemetryError, match="OSError"):
        hub.close()


def test_unserialisable_event_makes_jsonl_hub_fail(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    hub = TelemetryHub([JsonlBackend(path)])
    hub.emit(epoch_event(1))
    hub.emit(epoch_event(2, train_loss=float("nan")))  # strict JSON has no NaN
    with pytest.raises(TelemetryError):
        hub.close()
    assert [json.loads(x)["epoch"] for x in path.read_text().splitlines()] == [1]


def test_failing_backend_close_makes_close_raise() -> None:
    backend = FailingClose()
    hub = TelemetryHub([backend])
    hub.emit(epoch_event(1))
    with pytest.raises(TelemetryError, match="cannot flush"):
        hub.close()
    assert len(backend.events) == 1


def test_console_formats_epoch_event() -> None:
    stream = io.StringIO()
    backend = ConsoleBackend(stream)
    backend.write(epoch_event(3, episode=1))
    backend.close()
    line = stream.getvalue()
    assert line.count("\n") == 1
    assert "[episode 1 epoch   3]" in line
    assert "train_loss 1.235" in line and "val_loss 0.988" in line
    assert "val_acc  45.7%" in line
    assert "early:TRAIN(conv_light)" in line
    assert "mid:DORMA" in line and "mid:DORMA(" not in line


def test_console_formats_stage_change_event() -> None:
    stream = io.StringIO()
    ConsoleBackend(stream).write(
        Event(
            "stage_change",
            0,
            4,
            {
                "slot": "mid",
                "seed_id": "seed-2",
                "blueprint": "attention",
                "source": "TRAINING",
                "target": "BLENDING",
                "reason": "gate G1 passed",
            },
        )
    )
    assert stream.getvalue() == "[episode 0 epoch   4] mid: seed-2 TRAINING -> BLENDING (gate G1 passed)\n"


def test_console_other_events() -> None:
    stream = io.StringIO()
    backend = ConsoleBackend(stream)
    backend.write(Event("something_internal", 0, 1, {"x": 1}))
    assert stream.getvalue() == ""
    backend.write(Event("governor_rollback", 0, 5, {"reason": "non-finite loss"}))
    backend.write(
        Event(
            "episode_end",
            2,
            9,
            {
                "final_val_accuracy": 51.234,
                "final_test_accuracy": 50.126,
                "host_params": 18626,
                "seed_params": 1200,
                "seconds": 3.21,
                "train_gflops": 1234.5,
            },
        )
    )
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[episode 0 epoch   5] governor rollback: non-finite loss"
    assert lines[1] == (
        "[episode 2] done: test_acc 50.13% (val_acc 51.23%), host 18,626 + seeds 1,200 params, "
        "1,234 training GFLOPs, 3.2s"
    )


def test_format_event_unknown_kind_is_none() -> None:
    assert format_event(Event("unknown", 0, 0)) is None


def test_console_default_stream_is_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    ConsoleBackend().write(epoch_event(1))
    assert "epoch   1]" in capsys.readouterr().out


class SlowBackend(ListBackend):
    def write(self, event: Event) -> None:
        time.sleep(0.01)
        super().write(event)


def test_flush_returns_once_everything_emitted_is_written_and_raises_a_failure() -> None:
    slow = SlowBackend()
    hub = TelemetryHub([slow])
    for i in range(20):
        hub.emit(Event("x", 0, i))
    hub.flush()
    assert len(slow.events) == 20
    hub.close()
    failing = TelemetryHub([FailingBackend(fail_at=0)])
    failing.emit(Event("x", 0, 0))
    with pytest.raises(TelemetryError, match="disk full"):
        failing.flush()


def test_metrics_rows_and_events_go_to_their_own_files(tmp_path: Path) -> None:
    events, rows = JsonlBackend(tmp_path / "events.jsonl"), JsonlBackend(tmp_path / "metrics.jsonl", rows_only=True)
    hub = TelemetryHub([events, rows])
    hub.emit(Event("epoch", 0, 1, {"val_accuracy": 10.0}, time=1.0))
    hub.emit(Event(ROUND_METRICS, 4, 1, {"round": 1, "charts/SPS": 2.0}))
    hub.close()
    assert [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [
        {"round": 1, "charts/SPS": 2.0}
    ]
    assert [json.loads(x)["kind"] for x in (tmp_path / "events.jsonl").read_text().splitlines()] == ["epoch"]
