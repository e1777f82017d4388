"""A SQLite log keeps a few connections for its next reads and writers instead of opening one for each."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from events.codec import Record
from events.errors import LogWriteError
from events.log.sqlite import SqliteLog


class CountingLog(SqliteLog):
    """A SQLite log that counts the connections it opens."""

    opened = 0

    def connect(self) -> sqlite3.Connection:
        self.opened += 1
        return super().connect()


def record(n: int) -> Record:
    return Record(n % 2, f"key-{n}".encode(), f"value-{n}".encode(), n)


def test_reads_and_writers_one_after_another_reuse_the_logs_connections(tmp_path: Path) -> None:
    log = CountingLog(tmp_path / "events.db", partitions=2)
    log.ensure_topic()
    for n in range(20):  # as a run does: a writer per shard fenced, reads of the log, appends
        with log.writer(f"writer-{n % 3}") as writer:
            writer.append_records([record(n)])
            assert len(list(log.read_records())) == n + 1  # a read while the writer holds its connection
    assert log.opened <= 3, f"{log.opened} connections opened for 20 writers and 20 reads"
    log.close()


def test_a_closed_writer_refuses_to_append_while_its_connection_serves_another(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "events.db", partitions=2)
    log.ensure_topic()
    closed = log.writer("first")
    closed.append_records([record(0)])
    closed.close()
    closed.close()  # twice: still given back once
    second, third = log.writer("second"), log.writer("third")  # one takes the closed writer's connection
    with pytest.raises(LogWriteError, match="writer 'first' of the SQLite log is closed"):
        closed.append_records([record(1)])
    with pytest.raises(LogWriteError, match="is closed"):
        closed.check_fenced()
    second.append_records([record(2)])
    third.append_records([record(3)])
    assert [r.value for r in log.read_records()] == [b"value-0", b"value-2", b"value-3"]
    second.close()
    third.close()
    log.close()
