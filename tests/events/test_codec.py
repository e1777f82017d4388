"""The Avro codec: round trips, schema evolution, and typed errors on bad bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from events.avro_schema import SCHEMA_DIR, payload_schema, schema_path
from events.codec import (
    CHECKSUM_SIZE,
    FRAME_MAGIC,
    UNCHECKED_FRAME_MAGIC,
    EventCodec,
    SchemaRegistry,
)
from events.errors import CorruptEventError, EventDecodeError, UnknownEventTypeError
from events.model import Event, RunEvent
from events.registry import EVENT_TYPES
from tests.factories import at, batched, one_of_each, sample_steps


def test_every_event_type_round_trips_through_the_codec() -> None:
    codec = EventCodec()
    events = [*one_of_each(), *batched({"job": "MyJob", "run_id": "run-1"}, ("b", "c"), sample_steps(), at(20))]
    assert {type(e) for e in events} == set(EVENT_TYPES)
    for event in events:
        record = codec.to_record(event, partitions=4)
        assert record.key == event.key.encode()
        assert codec.decode(record.value or b"", "t", 0, 0, record.key) == event


def test_emitted_at_keeps_its_microseconds() -> None:
    codec = EventCodec()
    event = one_of_each()[0]
    decoded = codec.decode(codec.encode_value(event), "t", 0, 0, event.key.encode())
    assert decoded.emitted_at == event.emitted_at and decoded.emitted_at.microsecond == 123456


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_the_kept_schema_file_matches_the_model(cls: type[Event]) -> None:
    kept = json.loads(schema_path(SCHEMA_DIR, cls.event_type(), cls.SCHEMA_VERSION).read_text())
    assert kept == payload_schema(cls), "run `python -m events.avro_schema` and commit the schema file"


class ProbeV1(RunEvent):
    SCHEMA_VERSION: ClassVar[int] = 1
    note: str

    @classmethod
    def event_type(cls) -> str:
        return "Probe"

    @property
    def key(self) -> str:
        return self.run_key("PROBE")


class ProbeV2(ProbeV1):
    SCHEMA_VERSION: ClassVar[int] = 2
    priority: int = 5
    tags: tuple[str, ...] = ()


def write_schemas(directory: Path, *classes: type[ProbeV1]) -> None:
    for cls in classes:
        schema_path(directory, "Probe", cls.SCHEMA_VERSION).write_text(json.dumps(payload_schema(cls)))


def test_a_version_1_record_is_read_by_version_2(tmp_path: Path) -> None:
    write_schemas(tmp_path, ProbeV1, ProbeV2)
    old_writer = EventCodec(SchemaRegistry([ProbeV1], tmp_path))
    new_reader = EventCodec(SchemaRegistry([ProbeV2], tmp_path))
    written = old_writer.encode_value(ProbeV1(job="j", run_id="r", note="hello"), b"probe/key")
    read = new_reader.decode(written, "t", 0, 7, b"probe/key")
    assert isinstance(read, ProbeV2)
    assert (read.note, read.priority, read.tags) == ("hello", 5, ())


def test_a_version_newer_than_the_reader_knows_is_a_typed_error(tmp_path: Path) -> None:
    write_schemas(tmp_path, ProbeV1, ProbeV2)
    new_writer = EventCodec(SchemaRegistry([ProbeV2], tmp_path))
    old_reader = EventCodec(SchemaRegistry([ProbeV1], tmp_path))
    written = new_writer.encode_value(ProbeV2(job="j", run_id="r", note="x", priority=1), b"probe/key")
    with pytest.raises(UnknownEventTypeError, match=r"t\[2\]@9.*version 2 is newer"):
        old_reader.decode(written, "t", 2, 9, b"probe/key")


def test_an_unknown_event_type_names_topic_partition_offset() -> None:
    with pytest.raises(UnknownEventTypeError, match=r"events\[1\]@42.*'Mystery'") as caught:
        EventCodec().decode(b"\x0b\x07Mystery\x00\x01abc", "events", 1, 42, b"k")
    assert (caught.value.topic, caught.value.partition, caught.value.offset) == ("events", 1, 42)


@pytest.mark.parametrize(
    "value",
    [b"", b"\x00\x01", b"not an oncelog record", b"\x0b\xffJobRunStarted\x00\x01",
     b"\x0b\x0dJobRunStarted\x00\x01\x99"],
    ids=["empty", "short", "text", "bad-length", "truncated-body"],
)
def test_undecodable_bytes_are_a_typed_error(value: bytes) -> None:
    with pytest.raises(EventDecodeError, match=r"events\[0\]@3"):
        EventCodec().decode(value, "events", 0, 3, b"k")


def test_every_truncation_of_a_real_record_is_a_typed_error() -> None:
    codec = EventCodec()
    for event in one_of_each():
        value = codec.encode_value(event)
        for cut in range(len(value) - 1):
            with pytest.raises(EventDecodeError):
                codec.decode(value[:cut], "events", 0, cut, event.key.encode())


def unchecked_frame(value: bytes) -> bytes:
    """The same record in the frame written before checksums existed: magic 0x0B, no crc32 after the body."""
    return bytes([UNCHECKED_FRAME_MAGIC]) + value[1:-CHECKSUM_SIZE]


def test_records_of_the_unchecked_frame_stay_readable() -> None:
    codec = EventCodec()
    for event in one_of_each():
        value = codec.encode_value(event)
        assert value[0] == FRAME_MAGIC
        assert codec.decode(unchecked_frame(value), "t", 0, 0, event.key.encode()) == event


def test_an_unchecked_record_under_another_key_is_an_error() -> None:
    """Old-frame records carry no checksum, but their event id (uuid5 of the key) still exposes a changed key."""
    codec = EventCodec()
    event = one_of_each()[0]
    old = unchecked_frame(codec.encode_value(event))
    with pytest.raises(EventDecodeError, match=r"t\[0\]@5.*event id"):
        codec.decode(old, "t", 0, 5, event.key.encode() + b"x")


def test_a_damaged_type_name_is_damage_not_an_unknown_type() -> None:
    """The checksum is checked before the frame is believed: no 'upgrade oncelog' for a flipped letter."""
    codec = EventCodec()
    event = one_of_each()[0]
    value = bytearray(codec.encode_value(event))
    value[3] ^= 0x20  # a letter of the type name changes case
    with pytest.raises(CorruptEventError, match=r"t\[0\]@5.*checksum mismatch"):
        codec.decode(bytes(value), "t", 0, 5, event.key.encode())
