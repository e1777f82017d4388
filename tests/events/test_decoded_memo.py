"""The decoded memo: a record read again is decoded once and handed back as the same event, by its bytes alone, so
that a damaged, re-keyed or invalid record read again is still refused naming where it lies."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from events.codec import DECODED_MEMO_MAX_VALUE_BYTES, DecodedMemo, EventCodec, SchemaRegistry, default_registry
from events.commit import CommitStepApplied
from events.dataset import WatermarkAdvanced
from events.errors import CorruptEventError, EventDecodeError
from events.log.sqlite import SqliteLog
from events.model import SequenceFields
from events.registry import EVENT_TYPES
from tests.factories import at

SEQUENCE: SequenceFields = {"job": "j", "run_id": "r-1", "dataset_urn": "urn", "sequence_id": "r-1"}


@pytest.fixture
def codec() -> EventCodec:
    """A codec with a registry (and memo) of its own: what other tests decoded is not in it."""
    return EventCodec(SchemaRegistry(EVENT_TYPES))


@pytest.fixture
def sqlite_log(tmp_path: Path, codec: EventCodec) -> Iterator[SqliteLog]:
    log = SqliteLog(tmp_path / "events.db", partitions=1, codec=codec)
    log.ensure_topic()
    yield log
    log.close()


def watermark(value: int) -> WatermarkAdvanced:
    return WatermarkAdvanced(**SEQUENCE, partition="urn:0", low_watermark=0, value=value, emitted_at=at(value))


def values_read(log: SqliteLog) -> list[int]:
    """The values of the log's watermarks, read back."""
    return [logged.event.value for logged in log.read() if isinstance(logged.event, WatermarkAdvanced)]


def test_a_record_read_again_is_decoded_once_a_first_read_keeps_nothing(codec: EventCodec) -> None:
    event = watermark(10)
    record = codec.to_record(event, 1)
    value = record.value or b""
    first = codec.decode(value, "t", 0, 5, record.key)
    assert first == event and len(codec.registry.decoded) == 0  # read once: nothing kept
    second = codec.decode(value, "t", 0, 5, record.key)
    third = codec.decode(bytes(value), "t", 0, 5, record.key)  # equal bytes, another object: as a store reads them
    assert second == event and third is second and len(codec.registry.decoded) == 1
    assert codec.decode(value, "other-topic", 0, 5, record.key) is not second  # another topic's offsets: a first read
    assert EventCodec(codec.registry, memo=False).decode(value, "t", 0, 5, record.key) is not second


def test_a_record_damaged_rekeyed_or_invalid_is_refused_at_its_offset_however_often_it_was_read(
        codec: EventCodec) -> None:
    """Each refused read names the record's offset, before and after the good record's event was kept."""
    record = codec.to_record(CommitStepApplied(**SEQUENCE, step_index=2, outcome="executed"), 4)
    value = record.value or b""
    for _ in range(3):
        codec.decode(value, "events", 2, 9, record.key)
    assert len(codec.registry.decoded) == 1
    damaged = value[:20] + bytes([value[20] ^ 0x01]) + value[21:]
    invalid = codec.to_record(CommitStepApplied.trusted(**SEQUENCE, step_index=-1, outcome="executed"), 4)
    for _ in range(3):
        with pytest.raises(CorruptEventError, match=r"events\[2\]@9"):
            codec.decode(damaged, "events", 2, 9, record.key)
        with pytest.raises(CorruptEventError, match=r"events\[2\]@9"):
            codec.decode(value, "events", 2, 9, record.key.replace(b"step/2", b"step/3"))
        with pytest.raises(EventDecodeError, match=r"events\[2\]@9: CommitStepApplied v1 is invalid"):
            codec.decode(invalid.value or b"", "events", 2, 9, invalid.key)
        with pytest.raises(EventDecodeError, match=r"events\[2\]@9: CommitStepApplied v1 is invalid"):
            codec.view(invalid.value or b"", "events", 2, 9, invalid.key).event()
    assert len(codec.registry.decoded) == 1


def test_a_stored_record_damaged_after_it_was_read_again_is_refused_at_its_offset(sqlite_log: SqliteLog) -> None:
    """Through a store: the record's event was kept (read three times); its bytes changed on disk are refused,
    restored they read as before."""
    sqlite_log.append([watermark(10000), watermark(20000)])
    for _ in range(3):
        assert values_read(sqlite_log) == [10000, 20000]
    assert len(sqlite_log.codec.registry.decoded) == 2
    with closing(sqlite3.connect(sqlite_log.path)) as conn, conn:
        (seq, before), _ = conn.execute("SELECT seq, value FROM oncelog_records ORDER BY seq").fetchall()
        conn.execute("UPDATE oncelog_records SET value = ? WHERE seq = ?", (before[:-9] + b"\x00" + before[-8:], seq))
    with pytest.raises(CorruptEventError, match=rf"@{seq}: checksum mismatch"):
        list(sqlite_log.read())
    with closing(sqlite3.connect(sqlite_log.path)) as conn, conn:
        conn.execute("UPDATE oncelog_records SET value = ? WHERE seq = ?", (before, seq))
    assert values_read(sqlite_log) == [10000, 20000]


def test_the_memo_keeps_at_most_its_size_and_no_large_value() -> None:
    memo = DecodedMemo(3)
    event = watermark(1)
    for i in range(10):
        memo.put(b"k%d" % i, b"v%d" % i, event)
        assert 1 <= len(memo) <= 3
    assert memo.get(b"k9", b"v9") is event and memo.get(b"k0", b"v0") is None
    memo.put(b"big", b"x" * (DECODED_MEMO_MAX_VALUE_BYTES + 1), event)
    assert memo.get(b"big", b"x" * (DECODED_MEMO_MAX_VALUE_BYTES + 1)) is None


def test_every_codec_of_the_shipped_events_shares_one_registry() -> None:
    """Parsed schemas, writers and decoded events made once per process, not once per log opened."""
    first, second = EventCodec(), EventCodec()
    assert first.registry is second.registry is default_registry()
    first.encode_value(watermark(1))
    assert WatermarkAdvanced in second.registry.writers


def test_a_partition_longer_than_the_memo_read_again_keeps_nothing() -> None:
    """A log the memo cannot hold whole, read again (`verify` after a fold), would only churn it: nothing is kept,
    each read decodes; a short one read again is kept."""
    registry = SchemaRegistry(EVENT_TYPES)
    registry.decoded = DecodedMemo(4)
    codec = EventCodec(registry)
    records = [codec.to_record(watermark(i), 1) for i in range(6)]
    for _ in range(3):
        for offset, r in enumerate(records):
            codec.decode(r.value or b"", "long", 0, offset, r.key)
        for offset, r in enumerate(records[:3]):
            codec.decode(r.value or b"", "short", 0, offset, r.key)
    assert len(registry.decoded) == 3
    assert all(registry.decoded.get(r.key, r.value or b"") is not None for r in records[:3])
