"""Avro schemas as Arrow schemas: what the records engine's default writer needs to write a work unit's records as
Parquet (pyarrow), for tables (Iceberg, Delta) whose data files must be Parquet.

Supported: Avro's primitives, nullable unions (`["null", T]` either way round), records, arrays, maps, enums (as
strings), fixed and bytes (as binary), and the logical types timestamp-millis/micros (a UTC timestamp), date (date32),
decimal (decimal128) and uuid (a string). Anything else is refused naming the field, before a record is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from events.errors import ConfigError
from spark_pipeline.constructs import Schema

PRIMITIVES: dict[str, pa.DataType] = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                                      "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(),
                                      "string": pa.string()}
TIMESTAMPS = {"timestamp-millis": "ms", "timestamp-micros": "us"}
PARQUET_CODECS = {"snappy": "snappy", "gzip": "gzip", "zstd": "zstd", "lz4": "lz4", "none": "none",
                  "null": "none", "uncompressed": "none"}
"""writer.codec.type's values for Parquet (the DataFrame engine's names, dataframe/writers.py) → pyarrow's
`compression`; snappy is the default."""
MAX_DECIMAL_PRECISION = 38


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of an Avro record schema (its top-level fields as columns); a ConfigError naming the
    field otherwise."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise ConfigError(f"the output schema is no Avro record (got {_shown(schema)}): Parquet files hold "
                                  f"records")
    struct = _ArrowTypes().record(schema, "")
    return pa.schema(list(struct))


class _ArrowTypes:
    """Converts one schema, remembering its named types (a record, enum or fixed may be referred to by name)."""

    def __init__(self) -> None:
        self.named: dict[str, pa.DataType] = {}

    def record(self, schema: Mapping[str, Any], path: str) -> pa.StructType:
        """A record as a struct: each field nullable only when its type is a union with null."""
        fields = []
        for field in schema.get("fields", []):
            name = str(field["name"])
            where = f"{path}.{name}" if path else name
            arrow_type, nullable = self.nullable(field["type"], where)
            fields.append(pa.field(name, arrow_type, nullable=nullable))
        struct = pa.struct(fields)
        self._name(schema, struct)
        return struct

    def nullable(self, avro: Any, where: str) -> tuple[pa.DataType, bool]:
        """A field's (or item's, or value's) type, and whether it may be null (`["null", T]`)."""
        if isinstance(avro, list):
            others = [t for t in avro if t != "null"]
            if len(others) != 1 or len(avro) != 2:
                raise ConfigError(f"field {where!r}: the union {_shown(avro)} is not one type with null "
                                          f"(Parquet columns hold one type)")
            return self.type(others[0], where), True
        return self.type(avro, where), False

    def type(self, avro: Any, where: str) -> pa.DataType:
        """One Avro type (not a union) as an Arrow type."""
        if isinstance(avro, str):
            if avro in PRIMITIVES:
                return PRIMITIVES[avro]
            named = self.named.get(avro) or self.named.get(avro.rsplit(".", 1)[-1])
            if named is None:
                raise ConfigError(f"field {where!r}: type {avro!r} is no Avro type the Parquet writer knows")
            return named
        if not isinstance(avro, Mapping):
            raise ConfigError(f"field {where!r}: type {_shown(avro)} is not supported")
        logical = avro.get("logicalType")
        if logical is not None:
            return self.logical(avro, str(logical), where)
        kind = avro.get("type")
        if kind == "record":
            return self.record(avro, where)
        if kind == "array":
            item, nullable = self.nullable(avro["items"], f"{where}[]")
            return pa.list_(pa.field("element", item, nullable=nullable))
        if kind == "map":
            value, nullable = self.nullable(avro["values"], f"{where}{{}}")
            return pa.map_(pa.string(), pa.field("value", value, nullable=nullable))
        if kind == "enum":
            return self._name(avro, pa.string())
        if kind == "fixed":
            return self._name(avro, pa.binary())
        if isinstance(kind, str) and kind in PRIMITIVES:
            return PRIMITIVES[kind]
        if isinstance(kind, (list, Mapping)):
            return self.type(kind, where)  # {"type": {"type": "array", ...}}
        raise ConfigError(f"field {where!r}: type {_shown(avro)} is not supported")

    def logical(self, avro: Mapping[str, Any], logical: str, where: str) -> pa.DataType:
        """A logical type over its Avro type: timestamps, date, decimal, uuid; others refused."""
        base = avro.get("type")
        if logical in TIMESTAMPS and base == "long":
            return pa.timestamp(TIMESTAMPS[logical], tz="UTC")
        if logical == "date" and base == "int":
            return pa.date32()
        if logical == "uuid" and base == "string":
            return pa.string()
        if logical == "decimal" and base in ("bytes", "fixed"):
            precision, scale = int(avro.get("precision", 0)), int(avro.get("scale", 0))
            if not 1 <= precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
                raise ConfigError(f"field {where!r}: decimal({precision}, {scale}) does not fit Parquet's "
                                          f"decimal128 (precision 1 to {MAX_DECIMAL_PRECISION}, scale 0 to it)")
            return self._name(avro, pa.decimal128(precision, scale)) if base == "fixed" else pa.decimal128(
                precision, scale)
        raise ConfigError(f"field {where!r}: logical type {logical!r} on {_shown(base)} is not supported "
                                  f"(timestamp-millis, timestamp-micros, date, decimal and uuid are)")

    def _name(self, avro: Mapping[str, Any], arrow: pa.DataType) -> pa.DataType:
        """Remember a named type by its full and short names (a later field may use either)."""
        name = avro.get("name")
        if isinstance(name, str):
            namespace = avro.get("namespace")
            self.named[name] = arrow
            self.named[f"{namespace}.{name}" if namespace and "." not in name else name] = arrow
            self.named[name.rsplit(".", 1)[-1]] = arrow
        return arrow


def _shown(value: Any) -> str:
    """A schema fragment for a message, cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
