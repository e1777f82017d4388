"""The codec: events to and from the bytes stored in the log (Avro via fastavro, parsed schemas cached).

A value is a small frame followed by the Avro body:

    0x0B | len(type) : u8 | type : ascii | schema version : u16 big-endian | Avro(Envelope{..., payload})

The frame names the writer's schema, so a reader resolves any older version against the version it knows
(Avro schema resolution: a field added with a default is filled in). Keys are the transition's key in UTF-8.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import fastavro
from fastavro.types import Schema
from pydantic import ValidationError

from events.avro_schema import SCHEMA_DIR, envelope_schema, payload_fields, schema_path
from events.errors import EventDecodeError, UnknownEventTypeError
from events.keys import event_id_bytes, partition_for
from events.model import Event

FRAME_MAGIC = 0x0B
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MICROSECOND = timedelta(microseconds=1)
MILLISECOND = timedelta(milliseconds=1)


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
    writer: Schema
    reader: Schema | None
    """None when writer and reader are the same version: no resolution needed."""
    validate: Callable[[dict[str, Any]], Event]


@dataclass(frozen=True, slots=True)
class _Writer:
    frame: bytes
    schema: Schema
    payload_fields: frozenset[str]


class SchemaRegistry:
    """The payload schemas of the known event types, every version kept in `schema_dir`, parsed once."""

    def __init__(self, event_types: Iterable[type[Event]], schema_dir: Path = SCHEMA_DIR) -> None:
        self.schema_dir = schema_dir
        self.types: dict[str, type[Event]] = {t.event_type(): t for t in event_types}
        self._parsed: dict[tuple[str, int], Schema] = {}
        self._resolved: dict[tuple[str, int], _TypeSchemas] = {}

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
        found = _TypeSchemas(cls, writer, reader, cls.__pydantic_validator__.validate_python)
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


def default_registry() -> SchemaRegistry:
    """The registry of every event type oncelog ships, with the schemas kept in the package."""
    from events.registry import EVENT_TYPES

    return SchemaRegistry(EVENT_TYPES)


class EventCodec:
    """Encodes events to (key, value) bytes and decodes them back, naming the record on any failure."""

    def __init__(self, registry: SchemaRegistry | None = None) -> None:
        self.registry = registry or default_registry()
        self._writers: dict[type[Event], _Writer] = {}

    def encode_value(self, event: Event, key: bytes | None = None) -> bytes:
        """The value bytes of an event: frame + Avro envelope with its payload (key: the event's, if known)."""
        cls = type(event)
        writer = self._writers.get(cls)
        if writer is None:
            writer = self._prepare(cls)
        envelope = event.model_dump(include=writer.payload_fields)
        envelope["event_id"] = event_id_bytes(key if key is not None else event.key.encode("utf-8"))
        envelope["job"] = event.job
        envelope["run_id"] = event.run_id
        envelope["dataset_urn"] = event.urn
        envelope["emitted_at_us"] = (event.emitted_at - EPOCH) // MICROSECOND
        out = io.BytesIO()
        out.write(writer.frame)
        fastavro.schemaless_writer(out, writer.schema, envelope)
        return out.getvalue()

    def to_record(self, event: Event, partitions: int) -> Record:
        """The record a store appends for an event: partitioned by its aggregate, keyed by its transition."""
        key = event.key.encode("utf-8")
        timestamp_ms = (event.emitted_at - EPOCH) // MILLISECOND
        return Record(partition_for(event.aggregate, partitions), key, self.encode_value(event, key), timestamp_ms)

    def decode(self, value: bytes, topic: str, partition: int, offset: int) -> Event:
        """The event held by a record's value; EventDecodeError names topic, partition and offset."""
        try:
            if len(value) < 4 or value[0] != FRAME_MAGIC:
                raise ValueError("not an oncelog frame (bad magic byte or too short)")
            name_end = 2 + value[1]
            type_name = value[2:name_end].decode("ascii")
            version = int.from_bytes(value[name_end : name_end + 2], "big")
            body = io.BytesIO(value)
            body.seek(name_end + 2)
        except (ValueError, UnicodeDecodeError) as e:
            raise EventDecodeError(topic, partition, offset, f"malformed frame: {e}") from e
        try:
            schemas = self.registry.resolve(type_name, version)
        except LookupError as e:
            raise UnknownEventTypeError(topic, partition, offset, str(e.args[0])) from e
        try:
            envelope: Any = fastavro.schemaless_reader(body, schemas.writer, schemas.reader)
        except Exception as e:  # fastavro raises whatever the corrupt bytes provoke (EOFError, ValueError, ...)
            raise EventDecodeError(
                topic, partition, offset, f"Avro body of {type_name} v{version} is corrupt: {e!r}"
            ) from e
        del envelope["event_id"]
        # Exact to the microsecond while timestamps stay below 2**53 µs (the year 2255).
        envelope["emitted_at"] = datetime.fromtimestamp(envelope.pop("emitted_at_us") / 1e6, timezone.utc)
        if envelope["dataset_urn"] is None:
            del envelope["dataset_urn"]
        try:
            return schemas.validate(envelope)
        except ValidationError as e:
            raise EventDecodeError(topic, partition, offset, f"{type_name} v{version} is invalid: {e}") from e

    def _prepare(self, cls: type[Event]) -> _Writer:
        name = cls.event_type().encode("ascii")
        frame = bytes([FRAME_MAGIC, len(name)]) + name + cls.SCHEMA_VERSION.to_bytes(2, "big")
        writer = _Writer(frame, self.registry.current(cls), frozenset(payload_fields(cls)))
        self._writers[cls] = writer
        return writer
