"""The compiled Avro writer writes, byte for byte, what fastavro writes for the same datum: for every event type's
schema (random events), and for schemas using every Avro type; a value that does not fit names its field's path.
The writer generated from an event type's model writes what the compiled writer writes, and leaves to it any value
it was not made for."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.avro_encoder import AvroEncodeError, compile_writer
from events.avro_model_writer import UnhandledValue, compile_event_writer
from events.avro_schema import _SchemaBuilder
from events.codec import EventCodec, EventEncodeError, datum_builder
from events.commit import CommitSequenceCompleted
from events.keys import event_id_bytes
from events.model import Event, Frozen
from tests.events.test_lean_codec import event_fields

CODEC = EventCodec()

EVERY_TYPE = fastavro.parse_schema({
    "type": "record", "name": "Every", "namespace": "t", "fields": [
        {"name": "n", "type": "null"}, {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"},
        {"name": "l", "type": "long"}, {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
        {"name": "raw", "type": "bytes"}, {"name": "s", "type": "string"},
        {"name": "id", "type": {"type": "fixed", "name": "Id", "size": 4}},
        {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "longs", "type": {"type": "array", "items": "long"}},
        {"name": "names", "type": {"type": "map", "values": "string"}},
        {"name": "maybe", "type": ["null", "long"]},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
            {"name": "x", "type": "long"}, {"name": "tags", "type": {"type": "map", "values": "long"}}]}},
        {"name": "inners", "type": {"type": "array", "items": "Inner"}},
        {"name": "either", "type": ["null", "Inner", {"type": "record", "name": "Other", "fields": [
            {"name": "y", "type": "string"}]}]},
        {"name": "empty", "type": {"type": "record", "name": "Empty", "fields": []}},
        {"name": "later", "type": "long", "default": 7},
    ]}, named_schemas={})

texts = st.text(max_size=80)
longs = st.integers(-(2**63), 2**63 - 1)
inner = st.fixed_dictionaries({"x": longs, "tags": st.dictionaries(texts, longs, max_size=3)})
every = st.fixed_dictionaries({
    "n": st.none(), "b": st.booleans(), "i": st.integers(-(2**31), 2**31 - 1), "l": longs,
    "f": st.floats(width=32, allow_nan=False), "d": st.floats(allow_nan=False), "raw": st.binary(max_size=200),
    "s": texts, "id": st.binary(min_size=4, max_size=4), "colour": st.sampled_from(["RED", "GREEN", "BLUE"]),
    "longs": st.lists(longs, max_size=80) | st.lists(longs, max_size=3).map(tuple),
    "names": st.dictionaries(texts, texts, max_size=4), "maybe": st.none() | longs, "inner": inner,
    "inners": st.lists(inner, max_size=3), "empty": st.just({}),
    "either": st.none() | inner.map(lambda d: ("t.Inner", d))
    | st.fixed_dictionaries({"y": texts}).map(lambda d: ("t.Other", d)),
}, optional={"later": longs})


def fastavro_bytes(schema: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, datum)
    return out.getvalue()


def compiled_bytes(schema: Any, datum: Any) -> bytes:
    out = bytearray()
    compile_writer(schema)(out, datum)
    return bytes(out)


@settings(max_examples=400, deadline=None)
@given(every)
def test_every_avro_type_is_written_as_fastavro_writes_it(datum: dict[str, Any]) -> None:
    assert compiled_bytes(EVERY_TYPE, datum) == fastavro_bytes(EVERY_TYPE, datum)


@settings(max_examples=600, deadline=None)
@given(event_fields)
def test_every_event_type_is_written_as_fastavro_writes_it(drawn: tuple[type[Event], dict[str, Any]]) -> None:
    cls, fields = drawn
    fields.setdefault("emitted_at", datetime(2026, 11, 26, 12, 0, 0, 123456, tzinfo=UTC))
    event = cls(**fields)
    writer = CODEC._prepare(cls)
    envelope = {**writer.datum(event), "event_id": event_id_bytes(event.key.encode()), "dataset_urn": event.urn,
                "emitted_at_us": 1_764_158_400_123_456}
    assert compiled_bytes(writer.schema, envelope) == fastavro_bytes(writer.schema, envelope)


@settings(max_examples=600, deadline=None)
@given(event_fields)
def test_the_writer_generated_from_each_event_model_writes_what_the_general_path_writes(
        drawn: tuple[type[Event], dict[str, Any]]) -> None:
    cls, fields = drawn
    fields.setdefault("emitted_at", datetime(2026, 11, 26, 12, 0, 0, 123456, tzinfo=UTC))
    event = cls(**fields)
    writer = CODEC._prepare(cls)
    event_id, emitted_at_us = event_id_bytes(event.key.encode()), 1_764_158_400_123_456
    assert writer.fast is not None, f"{cls.__name__}: no writer generated"
    generated = bytearray(writer.frame)
    writer.fast(generated, event, event_id, event.urn, emitted_at_us)  # raises if it would fall back
    assert generated == CODEC._write_generally(writer, event, event_id, emitted_at_us)


def test_a_value_the_generated_writer_was_not_made_for_is_left_to_the_general_path() -> None:
    too_long = CommitSequenceCompleted.trusted(job="j", run_id="r", dataset_urn="d", sequence_id="s",
                                               emitted_at=datetime(2026, 11, 26, tzinfo=UTC), executed=2**64)
    with pytest.raises(EventEncodeError, match="executed: 18446744073709551616 is not a long"):
        CODEC.to_record(too_long, 4)

    class Left(Frozen):
        x: int

    class Right(Frozen):
        y: str

    class Either(Frozen):
        side: Left | Right | None = None

    class NarrowerLeft(Left):
        """A subclass: the generated writer dispatches on exact types; the general path on the type's MRO."""

    schema = fastavro.parse_schema(_SchemaBuilder().record(Either, ["side"], "Either"), named_schemas={})
    write = compile_event_writer(schema, Either, ())
    for value in (Either(side=Left(x=3)), Either(side=Right(y="é")), Either()):
        generated = bytearray()
        write(generated, value)
        assert bytes(generated) == compiled_bytes(schema, datum_builder(Either)(value))
    with pytest.raises(UnhandledValue):
        write(bytearray(), Either(side=NarrowerLeft(x=3)))


@pytest.mark.parametrize(("change", "path"), [
    ({"l": 2**63}, "l"), ({"i": -(2**31) - 1}, "i"), ({"s": 5}, "s"), ({"id": b"12345"}, "id"),
    ({"colour": "PINK"}, "colour"), ({"inner": {"x": 1, "tags": {"a": "b"}}}, "inner.tags"),
    ({"either": ("t.Nowhere", {})}, "either"), ({"maybe": "3"}, "maybe"), ({"n": 0}, "n")])
def test_a_value_that_does_not_fit_names_its_fields_path(change: dict[str, Any], path: str) -> None:
    datum = {"n": None, "b": True, "i": 1, "l": 2, "f": 1.5, "d": 2.5, "raw": b"r", "s": "s", "id": b"abcd",
             "colour": "RED", "longs": [1], "names": {}, "maybe": None, "inner": {"x": 1, "tags": {}}, "inners": [],
             "either": None, "empty": {}, **change}
    with pytest.raises(AvroEncodeError) as raised:
        compiled_bytes(EVERY_TYPE, datum)
    assert raised.value.path == path


def test_a_field_left_out_takes_its_default_or_is_named() -> None:
    datum: dict[str, Any] = {
        "n": None, "b": False, "i": 0, "l": 0, "f": 0.0, "d": 0.0, "raw": b"", "s": "", "id": b"abcd",
        "colour": "BLUE", "longs": [], "names": {}, "maybe": 3, "inner": {"x": -1, "tags": {"t": 1}}, "inners": [],
        "either": None, "empty": {}}
    assert compiled_bytes(EVERY_TYPE, datum) == fastavro_bytes(EVERY_TYPE, {**datum, "later": 7})
    del datum["s"]
    with pytest.raises(AvroEncodeError, match="^s: missing, and the schema gives no default$"):
        compiled_bytes(EVERY_TYPE, datum)


def test_an_event_that_does_not_fit_its_schema_is_an_encode_error_naming_event_and_field() -> None:
    completed = CommitSequenceCompleted.trusted(job="j", run_id="r", dataset_urn="d", sequence_id="s",
                                                emitted_at=datetime(2026, 11, 26, tzinfo=UTC), duration_ms=1.0,
                                                executed="three")
    with pytest.raises(EventEncodeError, match="CommitSequenceCompleted .* cannot be encoded: executed: 'three'"):
        CODEC.to_record(completed, 4)
