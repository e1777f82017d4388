"""Every stored event carries a checksum checked on read: one changed byte of a record, in its key or its value,
is a CorruptEventError naming where the record lies, never an event quietly believed."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.codec import EventCodec
from events.dataset import WatermarkAdvanced
from events.errors import CorruptEventError, EventDecodeError
from events.log.sqlite import SqliteLog
from tests.factories import at, one_of_each

EVENTS = one_of_each()
CODEC = EventCodec()
RECORDS = [(event.key.encode(), CODEC.encode_value(event)) for event in EVENTS]


def avro_long(n: int) -> bytes:
    """Avro's encoding of a long: zigzag, then a varint."""
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


@pytest.fixture
def sqlite_log(tmp_path: Path) -> Iterator[SqliteLog]:
    """A fresh SQLite log of two partitions."""
    log = SqliteLog(tmp_path / "events.db", partitions=2)
    log.ensure_topic()
    yield log
    log.close()


def rewrite(log: SqliteLog, offset: int, column: str, change: Callable[[bytes], bytes]) -> bytes:
    """Change one stored record's key or value in the SQLite file, as damage or a manual edit would; returns the
    bytes it held before."""
    assert column in ("key", "value")
    with closing(sqlite3.connect(log.path)) as conn, conn:
        (before,) = conn.execute(f"SELECT {column} FROM oncelog_records WHERE seq = ?", (offset,)).fetchone()
        conn.execute(f"UPDATE oncelog_records SET {column} = ? WHERE seq = ?", (change(bytes(before)), offset))
    return bytes(before)


def flip(position: int) -> Callable[[bytes], bytes]:
    """A change of one byte (one bit of it) at position."""
    return lambda data: data[:position] + bytes([data[position] ^ 0x01]) + data[position + 1 :]


def restore(before: bytes) -> Callable[[bytes], bytes]:
    """A change back to the bytes held before."""
    return lambda _: before


def test_a_watermark_changed_on_disk_is_refused_not_believed(sqlite_log: SqliteLog) -> None:
    """The issue's case: a WatermarkAdvanced value 10000 -> 18192 (one byte of its varint) was read as 18192."""
    event = WatermarkAdvanced(
        job="MyJob", run_id="run-1", dataset_urn="MyTopic", sequence_id="run-1", partition="MyTopic:0",
        low_watermark=0, value=10000, emitted_at=at(0),
    )
    sqlite_log.append([event])
    (logged,) = sqlite_log.read()
    old, new = avro_long(10000), avro_long(18192)
    assert len(old) == len(new) and sum(a != b for a, b in zip(old, new)) == 1

    def to_18192(value: bytes) -> bytes:
        assert value.count(old) == 1
        return value.replace(old, new)

    rewrite(sqlite_log, logged.offset, "value", to_18192)
    with pytest.raises(CorruptEventError, match=rf"{sqlite_log.topic}\[{logged.partition}\]@{logged.offset}") as caught:
        list(sqlite_log.read())
    message = str(caught.value)
    assert event.key in message and f"{caught.value.stored:#010x}" in message
    assert f"{caught.value.computed:#010x}" in message and caught.value.stored != caught.value.computed


@pytest.mark.parametrize("column", ["value", "key"])
def test_every_changed_byte_of_a_stored_record_is_found_at_its_offset(sqlite_log: SqliteLog, column: str) -> None:
    """Any byte of the stored value (frame, checksum, body, payload numbers) or of the key, changed in the file:
    reading raises at that record's offset, and the records around it still read."""
    events = one_of_each()
    sqlite_log.append(events)
    logged = list(sqlite_log.read())
    target = next(item for item in logged if isinstance(item.event, WatermarkAdvanced))
    length = len(target.event.key.encode()) if column == "key" else len(CODEC.encode_value(target.event))
    for position in range(length):
        before = rewrite(sqlite_log, target.offset, column, flip(position))
        errors: list[EventDecodeError] = []
        read = list(sqlite_log.read(on_error=errors.append))
        assert [(e.partition, e.offset) for e in errors] == [(target.partition, target.offset)], position
        assert len(read) == len(events) - 1
        rewrite(sqlite_log, target.offset, column, restore(before))
    assert [item.event for item in sqlite_log.read()] == [item.event for item in logged]


@settings(max_examples=400, deadline=None)
@given(data=st.data(), which=st.integers(0, len(RECORDS) - 1), replacement=st.integers(1, 255))
def test_every_single_byte_change_of_an_encoded_record_is_detected(
    data: st.DataObject, which: int, replacement: int
) -> None:
    """Property: a record (key + value) with any one byte replaced by any other never decodes."""
    key, value = RECORDS[which]
    position = data.draw(st.integers(0, len(key) + len(value) - 1), label="position")
    stored = bytearray(key + value)
    stored[position] ^= replacement  # a non-zero XOR: the byte differs
    with pytest.raises(EventDecodeError, match=r"events\[1\]@77"):
        CODEC.decode(bytes(stored[len(key) :]), "events", 1, 77, bytes(stored[: len(key)]))


def test_an_intact_record_decodes_with_its_key() -> None:
    for event, (key, value) in zip(EVENTS, RECORDS):
        assert CODEC.decode(value, "events", 0, 0, key) == event
