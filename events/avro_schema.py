"""Avro schemas derived from the event models, so the `.avsc` files kept in the package cannot drift from the code.

`python -m events.avro_schema` writes the payload schema of every event type's current version to
`events/schemas/<Type>.v<N>.avsc`; older versions stay as they were written, and stay readable.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from events.model import Event

SCHEMA_DIR = Path(__file__).parent / "schemas"
NAMESPACE = "oncelog"
ENVELOPE_FIELDS = ("job", "run_id", "emitted_at", "dataset_urn")
"""Model fields carried by the envelope rather than the payload."""

AvroSchema = dict[str, Any] | list[Any] | str


def payload_fields(cls: type[Event]) -> list[str]:
    """The model fields of an event type that its payload record carries, in declaration order."""
    return [name for name in cls.model_fields if name not in ENVELOPE_FIELDS]


def payload_schema(cls: type[Event]) -> dict[str, Any]:
    """The Avro record schema of an event type's payload (its current version)."""
    schema = _SchemaBuilder().record(cls, payload_fields(cls), name=f"{cls.event_type()}Payload")
    assert isinstance(schema, dict), "a fresh builder defines the payload record itself"
    return schema


def envelope_schema(payload: dict[str, Any]) -> dict[str, Any]:
    """The record a value holds: the envelope fields every event shares, then one event type's payload fields.

    Flat rather than nested: one record to decode, straight into the model's fields.
    """
    return {
        "type": "record",
        "name": payload["name"].removesuffix("Payload"),
        "namespace": NAMESPACE,
        "fields": [
            {"name": "event_id", "type": {"type": "fixed", "name": "EventId", "size": 16}},
            {"name": "job", "type": "string"},
            {"name": "run_id", "type": "string"},
            {"name": "dataset_urn", "type": ["null", "string"], "default": None},
            # Plain microseconds since the epoch (UTC): fastavro's timestamp-micros conversion costs more than
            # the rest of the decode put together.
            {"name": "emitted_at_us", "type": "long"},
            *payload["fields"],
        ],
    }


def schema_path(schema_dir: Path, event_type: str, version: int) -> Path:
    """Where the payload schema of one version of one event type is kept."""
    return schema_dir / f"{event_type}.v{version}.avsc"


class _SchemaBuilder:
    """Maps pydantic annotations to Avro types, defining each named type once per schema."""

    def __init__(self) -> None:
        self.defined: set[str] = set()

    def record(self, model: type[BaseModel], fields: list[str], name: str) -> dict[str, Any] | str:
        if name in self.defined:
            return name
        self.defined.add(name)
        avro_fields = []
        for field_name in fields:
            info = model.model_fields[field_name]
            avro_field: dict[str, Any] = {
                "name": field_name,
                "type": self.type_of(info.annotation, info, owner=f"{name}_{field_name}"),
            }
            default = _default_of(info)
            if default is not _NO_DEFAULT:
                avro_field["default"] = default
            avro_fields.append(avro_field)
        return {"type": "record", "name": name, "namespace": NAMESPACE, "fields": avro_fields}

    def type_of(self, annotation: Any, info: FieldInfo | None, owner: str) -> AvroSchema:
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin is typing.Annotated:
            return self.type_of(args[0], None, owner)
        if annotation is str:
            return "string"
        if annotation is bool:
            return "boolean"
        if annotation is int:
            return "long"
        if annotation is float:
            return "double"
        if annotation is datetime:
            return {"type": "long", "logicalType": "timestamp-micros"}
        if origin is Literal:
            return {"type": "enum", "name": owner, "namespace": NAMESPACE, "symbols": list(args)}
        if origin in (Union, types.UnionType):
            branches = [a for a in args if a is not type(None)]
            converted = [self.type_of(a, None, owner) for a in branches]
            return ["null", *converted] if len(branches) < len(args) else converted
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": self.type_of(args[0], None, owner)}
        if origin is dict and args[0] is str:
            return {"type": "map", "values": self.type_of(args[1], None, owner)}
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return self.record(annotation, list(annotation.model_fields), name=annotation.__name__)
        raise TypeError(f"no Avro mapping for {annotation!r} ({owner})")


_NO_DEFAULT = object()


def _default_of(info: FieldInfo) -> Any:
    """The Avro default of a field: what lets a newer reader read an older record without it."""
    if info.is_required():
        return _NO_DEFAULT
    value = info.get_default(call_default_factory=True)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (str, int, float, bool, list, dict)) or value is None:
        return value
    return _NO_DEFAULT


def write_current_schemas(schema_dir: Path = SCHEMA_DIR) -> list[Path]:
    """Write the current version's payload schema of every event type; returns the files written."""
    from events.registry import EVENT_TYPES

    schema_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for cls in EVENT_TYPES:
        path = schema_path(schema_dir, cls.event_type(), cls.SCHEMA_VERSION)
        path.write_text(json.dumps(payload_schema(cls), indent=2) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_current_schemas():
        print(written_path)
    sys.exit(0)
