"""A task's events appended ahead, on a thread of their own: in order, each batch whole, all of them by `drain`;
nothing after a batch that failed, and that failure raised to the task."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

import pytest

from events.codec import Record
from events.errors import LogWriteError
from events.log import EventLog, LogWriter, open_log
from spark_pipeline.engines.emit_ahead import AheadEmitter
from tests.factories import step_events


class FailingWriter(LogWriter):
    """A real SQLite writer whose `fail_at`-th append fails (nothing of it appended); it waits for `gate` first."""

    def __init__(self, inner: LogWriter, fail_at: int, gate: threading.Event) -> None:
        super().__init__(inner.name, inner.codec, inner.partitions)
        self.inner, self.fail_at, self.gate, self.appends = inner, fail_at, gate, 0
        self.closed = False

    def append_records(self, records: Iterable[Record]) -> int:
        self.gate.wait(10)
        self.appends += 1
        if self.appends == self.fail_at:
            raise LogWriteError(f"append {self.appends} refused")
        return self.inner.append_records(records)

    def check_fenced(self) -> None:
        self.inner.check_fenced()

    def close(self) -> None:
        self.closed = True
        self.inner.close()


@pytest.fixture
def log(tmp_path: Path) -> EventLog:
    return open_log(f"sqlite:///{tmp_path / 'log.db'}")


def run_ids(log: EventLog) -> list[str]:
    return [e.event.run_id for e in log.read()]


def test_batches_are_appended_in_order_and_all_by_drain(log: EventLog) -> None:
    gate = threading.Event()
    writers: list[FailingWriter] = []

    def opened() -> LogWriter:
        writers.append(FailingWriter(log.writer("task"), 0, gate))
        return writers[-1]

    with AheadEmitter(opened) as events:
        for run in ("a", "b", "c"):
            events.emit([e.model_copy(update={"run_id": run}) for e in step_events(2, datasets=1)])
        assert run_ids(log) == []  # emit returned before its batch was appended: the task's work goes on meanwhile
        gate.set()
        events.drain()
        assert run_ids(log) == ["a", "a", "b", "b", "c", "c"]
    assert writers[0].closed


def test_nothing_after_a_failed_batch_is_appended_and_the_failure_reaches_the_task(log: EventLog) -> None:
    gate = threading.Event()
    gate.set()
    emitter = AheadEmitter(lambda: FailingWriter(log.writer("task"), 2, gate))
    emitter.emit([e.model_copy(update={"run_id": "a"}) for e in step_events(1)])
    emitter.emit([e.model_copy(update={"run_id": "b"}) for e in step_events(1)])
    emitter.emit([e.model_copy(update={"run_id": "c"}) for e in step_events(1)])
    with pytest.raises(LogWriteError, match="append 2 refused"):
        emitter.drain()
    with pytest.raises(LogWriteError, match="append 2 refused"):
        emitter.emit(step_events(1))
    emitter.close()
    assert run_ids(log) == ["a"]


def test_a_writer_that_cannot_open_fails_the_next_emit(log: EventLog) -> None:
    def refused() -> LogWriter:
        raise LogWriteError("no writer")

    with AheadEmitter(refused) as events:
        events.emit(step_events(1))
        with pytest.raises(LogWriteError, match="no writer"):
            events.drain()
    assert run_ids(log) == []
