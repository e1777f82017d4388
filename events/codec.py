"""The codec: events to and from the bytes stored in the log (Avro: written by a writer compiled once per schema,
events.avro_encoder; read by fastavro; parsed schemas cached).

A value is a small frame, the Avro body, and a checksum:

    0x0C | len(type) : u8 | type : ascii | schema version : u16 BE | Avro(Envelope{..., payload}) | crc32 : u32 LE

The frame names the writer's schema, so a reader resolves any older version against the version it knows
(Avro schema resolution: a field added with a default is filled in). Keys are the transition's key in UTF-8.
The crc32 (zlib's) covers the record's key bytes and every byte of the value before it: one changed byte anywhere
in the key or the value is a `CorruptEventError` on read, in every store. Records written before the checksum
existed carry the older frame, `0x0B | len(type) | type | version | Avro(...)` with nothing after the body, and
stay readable, unchecked (only their event id, the uuid5 of the key, still exposes a changed key).
"""

from __future__ import annotations

import functools
import io
import json
import types
import typing
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Union

import fastavro
from fastavro.types import Schema
from pydantic import BaseModel, ValidationError

from events.avro_encoder import AvroEncodeError, Write, compile_writer
from events.avro_model_writer import EventWrite, UnsupportedSchema, compile_event_writer
from events.avro_schema import NAMESPACE, SCHEMA_DIR, envelope_schema, schema_path
from events.errors import (
    CorruptEventError,
    EventDecodeError,
    LogWriteError,
    UnknownEventTypeError,
)
from events.keys import event_id_bytes, partition_for
from events.model import Event

FRAME_MAGIC = 0x0C
"""The frame every record is written in: it carries a checksum."""
UNCHECKED_FRAME_MAGIC = 0x0B
"""The frame of records written before the checksum: still read, not checked."""
CHECKSUM_SIZE = 4
CRC_RESIDUE = 0x2144DF1C
"""zlib.crc32 of any data followed by its own crc32 in little-endian order: one call checks a record."""
ENVELOPE_EXTRAS = ("event_id", "dataset_urn", "emitted_at_us")
"""The envelope's fields an event's writer is given besides the event (its own fields hold job and run_id)."""
MAX_EVENT_BYTES = 256 * 1024
"""The most an encoded value may weigh: well under Kafka's default message.max.bytes (1 MB). Events whose lists grow
with the job are appended in parts (events.model.Parted) to stay under it."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
MILLISECOND = timedelta(milliseconds=1)
DECODED_MEMO_SIZE = 4096
"""Records read again whose decoded events a registry's codecs keep (`DecodedMemo`): a process that reads the same
records over and over (a fold from the start for every run of a simulation) decodes them about twice."""
DECODED_MEMO_MAX_VALUE_BYTES = 2048
"""Values larger than this are not kept: bounds the memo's memory whatever the log holds (measured: 10 MiB for 4,096
events of benchmarks.log_throughput's mix, 200 bytes a value)."""


class EventEncodeError(LogWriteError):
    """An event's fields do not fit its schema (a bug of the code that built it): nothing of its batch is appended."""

    def __init__(self, event: Event, error: AvroEncodeError) -> None:
        super().__init__(f"{event.event_type()} {event.key!r} cannot be encoded: {error}")


class EventTooLargeError(LogWriteError):
    """An event encodes to more than MAX_EVENT_BYTES: nothing of its batch is appended."""

    def __init__(self, event: Event, size: int) -> None:
        super().__init__(
            f"{event.event_type()} {event.key!r} encodes to {size:,} bytes, over the limit of {MAX_EVENT_BYTES:,} "
            f"(events.codec.MAX_EVENT_BYTES); append it with event.in_parts()")
        self.size = size


@dataclass(frozen=True, slots=True)
class Record:
    """A record as a store writes it: partition, key bytes, value bytes (None: a tombstone), timestamp."""

    partition: int
    key: bytes
    value: bytes | None
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class _TypeSchemas:
    cls: type[Event]
    label: str
    """`<type> v<version>`, for error messages."""
    writer: Schema
    reader: Schema | None
    """None when writer and reader are the same version: no resolution needed."""
    validate: Callable[[dict[str, Any]], Event]


@dataclass(frozen=True, slots=True)
class _Writer:
    frame: bytes
    schema: Schema
    datum: Callable[[Any], dict[str, Any]]
    """The event's fields as fastavro takes them (a fresh dict the envelope fields are added to)."""
    write: Write
    """The schema's compiled writer (events.avro_encoder): the bytes fastavro would write, without its walk."""
    fast: EventWrite | None
    """The writer generated from schema and model (events.avro_model_writer); None where they do not pair."""


Convert = Callable[[Any], Any]


def datum_builder(model: type[BaseModel]) -> Callable[[Any], dict[str, Any]]:
    """A function turning a model into the dict fastavro writes: its fields, nested models as dicts too.

    Cheaper than `model_dump` (a copy of the instance's field values, converting only fields that hold models),
    and it names the branch of every union of records (fastavro's tuple notation), which the compiled writer needs
    where a union holds several records (fastavro would find it by validating the value against each branch).
    Fields the schema does not have (`emitted_at`, carried as `emitted_at_us`) are not written.
    """
    nested = {name: convert for name, info in model.model_fields.items() if (convert := _converter(info.annotation))}
    if not nested:
        return lambda value: vars(value).copy()

    def datum(value: Any) -> dict[str, Any]:
        fields: dict[str, Any] = vars(value).copy()
        for name, convert in nested.items():
            fields[name] = convert(fields[name])
        return fields

    return datum


def _converter(annotation: Any) -> Convert | None:
    """How to turn a field's value into what fastavro writes; None when it writes the value as it is."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _converter(args[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return datum_builder(annotation)
    if origin in (Union, types.UnionType):
        return _union_converter(args)
    # tuple[X, ...] holds X; dict[str, X] maps to X (Avro keys are strings).
    item = _converter(args[0] if origin is tuple else args[-1]) if origin in (tuple, dict) and args else None
    if item is None:
        return None
    if origin is dict:
        return lambda value: {k: item(v) for k, v in value.items()}
    return lambda value: [item(v) for v in value]


def _union_converter(branches: tuple[Any, ...]) -> Convert | None:
    """A union: each value converted as its branch (found by the value's type); a record tagged with its name."""
    by_type: dict[Any, Convert] = {}
    for branch in branches:
        if typing.get_origin(branch) is typing.Annotated:
            branch = typing.get_args(branch)[0]
        if isinstance(branch, type) and issubclass(branch, BaseModel):
            by_type[branch] = _tagged(branch)
        elif (nested := _converter(branch)) is not None:
            by_type[typing.get_origin(branch)] = nested  # a tuple or a dict holding records
    if not by_type:
        return None

    def convert(value: Any) -> Any:
        for cls in type(value).__mro__:  # the value's own type, else the branch it subclasses
            if cls in by_type:
                return by_type[cls](value)
        return value

    return convert


def _tagged(model: type[BaseModel]) -> Convert:
    """A record of a union, in fastavro's tuple notation: (Avro full name, datum), naming the branch to write."""
    name, datum = f"{NAMESPACE}.{model.__name__}", datum_builder(model)
    return lambda value: (name, datum(value))


class SchemaRegistry:
    """The payload schemas of the known event types, every version kept in `schema_dir`, parsed once."""

    def __init__(self, event_types: Iterable[type[Event]], schema_dir: Path = SCHEMA_DIR) -> None:
        self.schema_dir = schema_dir
        self.types: dict[str, type[Event]] = {t.event_type(): t for t in event_types}
        self._parsed: dict[tuple[str, int], Schema] = {}
        self._resolved: dict[tuple[str, int], _TypeSchemas] = {}
        self.writers: dict[type[Event], _Writer] = {}
        """Each type's frame, parsed schema and datum builder, made once per registry (every codec shares them)."""
        self.frames: dict[bytes, _TypeSchemas] = {}
        """Schemas by the frame bytes that name them: a dict lookup instead of parsing each record's frame."""
        self.decoded = DecodedMemo(DECODED_MEMO_SIZE)
        """Events decoded from records of these schemas, by the records' bytes."""

    def current(self, cls: type[Event]) -> Schema:
        """The parsed envelope schema of an event type's current version (what writers use)."""
        return self._parse(cls.event_type(), cls.SCHEMA_VERSION)

    def resolve(self, type_name: str, version: int) -> _TypeSchemas:
        """Writer and reader schemas for a record written as `version` of `type_name`."""
        found = self._resolved.get((type_name, version))
        if found is not None:
            return found
        cls = self.types.get(type_name)
        if cls is None:
            raise LookupError(f"unknown event type {type_name!r}")
        if version > cls.SCHEMA_VERSION:
            raise LookupError(
                f"{type_name} schema version {version} is newer than this oncelog knows "
                f"({cls.SCHEMA_VERSION}); upgrade oncelog to read it"
            )
        writer = self._parse(type_name, version)
        reader = None if version == cls.SCHEMA_VERSION else self.current(cls)
        found = _TypeSchemas(cls, f"{type_name} v{version}", writer, reader, cls.__pydantic_validator__.validate_python)
        self._resolved[(type_name, version)] = found
        return found

    def _parse(self, type_name: str, version: int) -> Schema:
        parsed = self._parsed.get((type_name, version))
        if parsed is None:
            path = schema_path(self.schema_dir, type_name, version)
            try:
                payload = json.loads(path.read_text())
            except FileNotFoundError as e:
                raise LookupError(f"no schema file {path} for {type_name} version {version}") from e
            parsed = fastavro.parse_schema(envelope_schema(payload))
            self._parsed[(type_name, version)] = parsed
        return parsed


@functools.cache
def default_registry() -> SchemaRegistry:
    """The registry of every event type oncelog ships, with the schemas kept in the package: one per process, so
    that every log's codec shares its parsed schemas, writers and decoded events."""
    from events.registry import EVENT_TYPES

    return SchemaRegistry(EVENT_TYPES)


class DecodedMemo:
    """Events decoded before, by their record's key and value bytes, kept for records read again.

    Decoding is a function of those bytes alone (the checksum and the event id cover both), so bytes decoded once
    give the same event again: it is returned without reading or validating anything. Only events decoded and
    validated are kept; a record that failed is decoded (and refused) again each time it is read.

    Keeping an event costs a read about a fifth more (measured: the events kept alive instead of their memory reused
    at once), so a record is kept only once it is read again (an offset of its topic's partition at or below one
    already decoded: a fold from the start after another, as a simulation's every run does) and only from a
    partition no longer than the memo: a log read once (a rebuild, a catch-up) or a long one read again (`verify`
    after a fold) keeps nothing. At most `size` events, all forgotten at once when full (no eviction order to keep
    up on each insert).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._events: dict[tuple[bytes, bytes], Event] = {}
        self._read_past: dict[tuple[str, int], int] = {}
        """The highest offset decoded in each topic and partition."""

    def __len__(self) -> int:
        return len(self._events)

    def clear(self) -> None:
        """Forget every event kept, and which offsets were read."""
        self._events, self._read_past = {}, {}

    def keeps(self, topic: str, partition: int, offset: int) -> bool:
        """Whether a record's event is looked for and kept: it is read again (at or below the highest offset of its
        partition decoded in this process; if not, that offset is now the highest) in a partition the memo could
        hold whole (a log read again that the memo cannot hold would only churn it)."""
        where = (topic, partition)
        past = self._read_past.get(where, -1)
        if offset > past:
            self._read_past[where] = offset
            return False
        return past < self.size

    def get(self, key: bytes, value: bytes) -> Event | None:
        """The event these bytes were decoded to, if kept."""
        return self._events.get((key, value)) if value.__class__ is bytes else None

    def put(self, key: bytes, value: bytes, event: Event) -> None:
        """Keep the event decoded from these bytes (unless large), forgetting all the others first when full."""
        if value.__class__ is not bytes or len(value) > DECODED_MEMO_MAX_VALUE_BYTES:
            return
        if len(self._events) >= self.size:
            self._events = {}  # a new dict, not clear(): a thread reading the old one meanwhile is not disturbed
        self._events[(key, value)] = event


class EventCodec:
    """Encodes events to (key, value) bytes and decodes them back, naming the record on any failure.

    Every event decoded is validated (pydantic-core builds it from the decoded fields; measured, no unvalidated
    construction in Python is cheaper: docs/benchmarks.md), once: the registry's `DecodedMemo` hands the same bytes'
    event back without decoding them again (`memo=False`: every record decoded, as before the memo). A reader that
    needs a few fields takes a `view`, which builds no event at all. Events are written by the writer generated from
    their model (`generated=False`: through their datum and the schema's compiled writer, the path before it).
    """

    def __init__(self, registry: SchemaRegistry | None = None, memo: bool = True, generated: bool = True) -> None:
        self.registry = registry or default_registry()
        self._writers = self.registry.writers
        self._frames = self.registry.frames
        self._memo = self.registry.decoded if memo else None
        self._generated = generated

    def encode_value(self, event: Event, key: bytes | None = None) -> bytes:
        """The value bytes of an event: frame + Avro envelope with its payload (key: the event's, if known)."""
        if key is None:
            key = event.key.encode("utf-8")
        return self._encode(event, key, (event.emitted_at - EPOCH) // MICROSECOND)

    def to_record(self, event: Event, partitions: int) -> Record:
        """The record a store appends for an event: partitioned by its aggregate, keyed by its transition."""
        key = event.key.encode("utf-8")
        emitted_at_us = (event.emitted_at - EPOCH) // MICROSECOND
        value = self._encode(event, key, emitted_at_us)
        return Record(partition_for(event.aggregate, partitions), key, value, emitted_at_us // 1000)

    def _encode(self, event: Event, key: bytes, emitted_at_us: int) -> bytes:
        """Frame + Avro envelope: the event's fields, its id (from its key) and its time in µs since the epoch;
        then the checksum of the key and all of that."""
        writer = self._writers.get(type(event))
        if writer is None:
            writer = self._prepare(type(event))
        event_id = event_id_bytes(key)
        if writer.fast is None or not self._generated:
            out = self._write_generally(writer, event, event_id, emitted_at_us)
        else:
            out = bytearray(writer.frame)
            try:
                writer.fast(out, event, event_id, event.urn, emitted_at_us)
            except Exception:  # a value the generated writer does not take: the general path writes it, or says why
                out = self._write_generally(writer, event, event_id, emitted_at_us)
        if len(out) > MAX_EVENT_BYTES:
            raise EventTooLargeError(event, len(out))
        out += zlib.crc32(out, zlib.crc32(key)).to_bytes(CHECKSUM_SIZE, "little")
        return bytes(out)

    @staticmethod
    def _write_generally(writer: _Writer, event: Event, event_id: bytes, emitted_at_us: int) -> bytearray:
        """Frame + Avro envelope through the event's datum and the compiled schema writer."""
        envelope = writer.datum(event)  # job and run_id included
        envelope["event_id"] = event_id
        envelope["dataset_urn"] = event.urn
        envelope["emitted_at_us"] = emitted_at_us
        out = bytearray(writer.frame)
        try:
            writer.write(out, envelope)
        except AvroEncodeError as e:
            raise EventEncodeError(event, e) from e
        return out

    def decode(self, value: bytes, topic: str, partition: int, offset: int, key: bytes | None) -> Event:
        """The event held by a record (its value, and its key the checksum covers; None: a record without one).

        EventDecodeError names topic, partition and offset; CorruptEventError when the checksum does not match.
        """
        key = key or b""
        memo = self._memo
        if memo is not None and not memo.keeps(topic, partition, offset):
            memo = None  # a first read: nothing kept to find, nothing worth keeping yet
        if memo is not None and (known := memo.get(key, value)) is not None:
            return known
        schemas, fields = self._read(value, topic, partition, offset, key)
        try:
            event = schemas.validate(fields)
        except ValidationError as e:
            raise EventDecodeError(topic, partition, offset, f"{schemas.label} is invalid: {e}") from e
        if memo is not None:
            memo.put(key, value, event)
        return event

    def decode_unless(self, value: bytes, topic: str, partition: int, offset: int, key: bytes | None,
                      viewed: frozenset[bytes]) -> Event | EventView:
        """`decode`, except for a record whose type is named in `viewed` (names in ASCII): that one is only viewed,
        its checksum and envelope checked as `view` checks them, its payload neither decoded nor validated. For a
        reader that does nothing with those types' payloads (the fold and DatasetPublished), which would otherwise
        decode and validate every one of them to drop it."""
        if len(value) > 2 and value[2 : 2 + value[1]] in viewed:
            return self.view(value, topic, partition, offset, key)
        return self.decode(value, topic, partition, offset, key)

    def view(self, value: bytes, topic: str, partition: int, offset: int, key: bytes | None) -> EventView:
        """The record read as far as its envelope (type, job, run, dataset, time), checked as `decode` checks it,
        its payload left undecoded: what a reader that needs a few of those reads. `fields()` and `event()` decode
        the rest when asked, with `decode`'s errors."""
        key = key or b""
        schemas, body_start, checked = self._open(value, topic, partition, offset, key)
        try:
            event_id, job, run_id, urn, emitted_at_us = read_envelope(
                value, body_start, len(value) - CHECKSUM_SIZE if checked else len(value))
        except (IndexError, ValueError) as e:
            raise EventDecodeError(topic, partition, offset, f"Avro body of {schemas.label} is corrupt: {e!r}") from e
        if not checked:
            _check_event_id(event_id, key, schemas, topic, partition, offset)
        return EventView(schemas.cls.event_type(), job, run_id, urn, datetime.fromtimestamp(emitted_at_us / 1e6, UTC),
                         self, value, key, topic, partition, offset)

    def _read(self, value: bytes, topic: str, partition: int, offset: int, key: bytes
              ) -> tuple[_TypeSchemas, dict[str, Any]]:
        """The record's schemas and its fields as its schema reads them (envelope and payload: `emitted_at` a
        datetime, no event id)."""
        schemas, body_start, checked = self._open(value, topic, partition, offset, key)
        body = io.BytesIO(value)
        body.seek(body_start)
        try:
            envelope: Any = fastavro.schemaless_reader(body, schemas.writer, schemas.reader)
            event_id = envelope.pop("event_id")
            if not checked and body.tell() != len(value):
                raise ValueError(f"{len(value) - body.tell()} bytes after the body")
            # Exact to the microsecond while timestamps stay below 2**53 µs (the year 2255).
            envelope["emitted_at"] = datetime.fromtimestamp(envelope.pop("emitted_at_us") / 1e6, UTC)
        except Exception as e:  # fastavro raises whatever the corrupt bytes provoke (EOFError, ValueError, ...)
            raise EventDecodeError(topic, partition, offset, f"Avro body of {schemas.label} is corrupt: {e!r}") from e
        if not checked:
            _check_event_id(event_id, key, schemas, topic, partition, offset)
        if envelope["dataset_urn"] is None:
            del envelope["dataset_urn"]
        return schemas, envelope

    def _open(
        self, value: bytes, topic: str, partition: int, offset: int, key: bytes
    ) -> tuple[_TypeSchemas, int, bool]:
        """The schemas a record's frame names (looked up by the frame's bytes), where the Avro body after it
        starts, and whether the record carries a checksum (checked here).

        The checksum is checked before anything the frame says is believed: a damaged type name or version
        is reported as damage, not as an event type to upgrade for.
        """
        try:
            if len(value) < 4 or value[0] not in (FRAME_MAGIC, UNCHECKED_FRAME_MAGIC):
                raise ValueError("not an oncelog frame (bad magic byte or too short)")
            checked = value[0] == FRAME_MAGIC
            if checked and zlib.crc32(value, zlib.crc32(key)) != CRC_RESIDUE:
                stored = int.from_bytes(value[-CHECKSUM_SIZE:], "little")
                computed = zlib.crc32(value[:-CHECKSUM_SIZE], zlib.crc32(key))
                raise CorruptEventError(topic, partition, offset, key, stored, computed)
            frame_end = 4 + value[1]
            frame = value[:frame_end]
            schemas = self._frames.get(frame)
            if schemas is None:
                type_name = value[2 : frame_end - 2].decode("ascii")
                version = int.from_bytes(value[frame_end - 2 : frame_end], "big")
        except (ValueError, UnicodeDecodeError) as e:
            raise EventDecodeError(topic, partition, offset, f"malformed frame: {e}") from e
        if schemas is None:
            try:
                schemas = self.registry.resolve(type_name, version)
            except LookupError as e:
                raise UnknownEventTypeError(topic, partition, offset, str(e.args[0])) from e
            self._frames[frame] = schemas
        return schemas, frame_end, checked

    def _prepare(self, cls: type[Event]) -> _Writer:
        name = cls.event_type().encode("ascii")
        frame = bytes([FRAME_MAGIC, len(name)]) + name + cls.SCHEMA_VERSION.to_bytes(2, "big")
        schema = self.registry.current(cls)
        try:
            fast: EventWrite | None = compile_event_writer(schema, cls, ENVELOPE_EXTRAS)
        except UnsupportedSchema:
            fast = None
        writer = _Writer(frame, schema, datum_builder(cls), compile_writer(schema), fast)
        self._writers[cls] = writer
        return writer


def _check_event_id(event_id: bytes, key: bytes, schemas: _TypeSchemas, topic: str, partition: int, offset: int
                    ) -> None:
    """An unchecked (0x0B) record's event id must be its key's: else its key or value was changed."""
    if event_id != event_id_bytes(key):
        raise EventDecodeError(
            topic,
            partition,
            offset,
            f"the event id of this {schemas.label} record (unchecked 0x0B frame) is not the one of its key "
            f"{key.decode('utf-8', 'replace')!r}: its key or value was changed after it was written",
        )


ENVELOPE_PREFIX = (("event_id", "fixed16"), ("job", "string"), ("run_id", "string"), ("dataset_urn", "null|string"),
                   ("emitted_at_us", "long"))
"""The fields every Avro body starts with, in every version of every type (events.avro_schema.envelope_schema):
what `read_envelope` reads by hand."""


def read_envelope(value: bytes, pos: int, end: int) -> tuple[bytes, str, str, str | None, int]:
    """(event id, job, run id, dataset URN, emitted_at µs) from the Avro body starting at `pos` (ending at `end`):
    the envelope alone, without fastavro's per-record setup; ValueError or IndexError when the bytes run short."""
    event_id = value[pos : pos + 16]
    job, pos = _read_string(value, pos + 16)
    run_id, pos = _read_string(value, pos)
    branch, pos = _read_long(value, pos)
    if branch == 1:
        urn: str | None
        urn, pos = _read_string(value, pos)
    elif branch == 0:
        urn = None
    else:
        raise ValueError(f"dataset_urn: union branch {branch} of 2")
    emitted_at_us, pos = _read_long(value, pos)
    if pos > end:
        raise ValueError(f"the envelope runs {pos - end} bytes past the body")
    return event_id, job, run_id, urn, emitted_at_us


def _read_long(value: bytes, pos: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at pos, and the position after it."""
    byte = value[pos]
    pos += 1
    n, shift = byte & 0x7F, 7
    while byte & 0x80:
        byte = value[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def _read_string(value: bytes, pos: int) -> tuple[str, int]:
    """An Avro string at pos, and the position after it."""
    byte = value[pos]
    if byte & 0x81:  # a length of 64 bytes or more (a varint of several bytes), or a negative one
        size, pos = _read_long(value, pos)
        if size < 0:
            raise ValueError(f"a string of {size} bytes")
    else:
        size, pos = byte >> 1, pos + 1
    return value[pos : pos + size].decode("utf-8"), pos + size


@dataclass(slots=True)
class EventView:
    """A record read as far as its envelope: its type, job, run, dataset (the URN of a dataset's event, else None)
    and time, its payload decoded only when asked (`fields()`), its event built only when asked (`event()`).

    Read-only by convention, not frozen: a frozen dataclass's construction costs as much as reading the envelope.
    """

    event_type: str
    job: str
    run_id: str
    dataset_urn: str | None
    emitted_at: datetime
    codec: EventCodec
    value: bytes
    key: bytes
    topic: str
    partition: int
    offset: int

    def fields(self) -> dict[str, Any]:
        """Every field as the record's schema reads it (decoded now, at each call): arrays as lists, nested records
        as dicts; EventDecodeError naming the record when its body is corrupt."""
        return self.codec._read(self.value, self.topic, self.partition, self.offset, self.key)[1]

    def event(self) -> Event:
        """The event, decoded, built and validated now as `EventCodec.decode` does it (with its errors)."""
        return self.codec.decode(self.value, self.topic, self.partition, self.offset, self.key)
