"""The projector's fold only views the records of the types it does nothing with (DatasetPublished): it builds none
of them, yet reaches the state a fold of every event decoded and validated reaches, and a damaged one is still
reported where it lies."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from events.codec import EventView
from events.errors import CorruptEventError
from events.log.sqlite import SqliteLog
from events.published import DatasetPublished
from projections.projector import NOT_FOLDED_NAMES, ProjectionStopped, Projector
from projections.state import NOT_FOLDED, State
from tests.factories import one_of_each

EVENTS = one_of_each()


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteLog]:
    """A SQLite log holding one event of every type, twice over (two runs), DatasetPublished among them."""
    log = SqliteLog(tmp_path / "events.db", partitions=2)
    log.ensure_topic()
    with log.writer("test") as writer:
        writer.append(EVENTS)
        writer.append(one_of_each(run_id="run-2"))
    yield log
    log.close()


def fully_decoded_fold(log: SqliteLog) -> State:
    """The state from every record decoded, built and validated (`EventLog.read`), folded one by one."""
    state = State()
    for logged in log.read():
        state.apply(logged)
    state.check_ends()
    return state


def published_offsets(log: SqliteLog) -> list[tuple[int, int]]:
    """(partition, offset) of every DatasetPublished record."""
    return [(r.partition, r.offset) for r in log.read_records()
            if r.value is not None and log.codec.view(r.value, r.topic, r.partition, r.offset, r.key).event_type
            == DatasetPublished.event_type()]


def test_the_fold_views_what_it_does_not_fold_and_reaches_the_state_a_full_decode_reaches(log: SqliteLog) -> None:
    assert NOT_FOLDED == {DatasetPublished}
    state, report = Projector(log).rebuild(use_snapshot=False)
    assert report.events == 2 * len(EVENTS)
    assert state == fully_decoded_fold(log)  # every view, every offset (the viewed records' included), every problem
    kinds = {r.offset: type(log.codec.decode_unless(r.value, r.topic, r.partition, r.offset, r.key, NOT_FOLDED_NAMES))
             for r in log.read_records() if r.value is not None}
    viewed = {offset for offset, kind in kinds.items() if kind is EventView}
    assert viewed == {offset for _, offset in published_offsets(log)} and len(viewed) == 2
    assert all(kind is not EventView for offset, kind in kinds.items() if offset not in viewed)


def test_a_damaged_record_the_fold_only_views_is_still_reported_where_it_lies(log: SqliteLog) -> None:
    partition, offset = published_offsets(log)[0]
    with closing(sqlite3.connect(log.path)) as conn, conn:
        (value,) = conn.execute("SELECT value FROM oncelog_records WHERE seq = ?", (offset,)).fetchone()
        damaged = bytes(value[:-10]) + bytes([value[-10] ^ 0x01]) + bytes(value[-9:])  # a byte of its payload
        conn.execute("UPDATE oncelog_records SET value = ? WHERE seq = ?", (damaged, offset))
    state, _ = Projector(log).rebuild(use_snapshot=False)
    assert [(p.partition, p.offset, p.kind) for p in state.problems if p.kind == "undecodable"] == [
        (partition, offset, "undecodable")]
    with pytest.raises(ProjectionStopped) as stopped:
        Projector(log, stop_on_error=True).rebuild(use_snapshot=False)
    assert isinstance(stopped.value.error, CorruptEventError)
    assert (stopped.value.error.partition, stopped.value.error.offset) == (partition, offset)
