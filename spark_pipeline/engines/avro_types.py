"""Avro schemas as Spark types, and the Avro schema a job's record converters output: what the DataFrame engine
needs to know before it runs record converters through mapInArrow (Spark must know a stage's output columns), and
what choice.py asks to know whether it can.

Pure: builds the job's converters on the driver and asks them, reading no record.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from events.job import WorkUnitSpec
from spark_pipeline.constructs import Converter, Schema, WorkUnitState
from spark_pipeline.engines.records.flow import chain_schema
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobfile.plugins import make_construct
from spark_pipeline.sources import kafka_topic, synthetic

PRIMITIVES: dict[str, DataType] = {"boolean": BooleanType(), "int": IntegerType(), "long": LongType(),
                                   "float": FloatType(), "double": DoubleType(), "bytes": BinaryType(),
                                   "string": StringType()}
CONVERTERS_KEY = "converter.classes"


class UnsupportedSchema(Exception):
    """An Avro schema with no Spark type here (named-type references, unions of several non-null types); internal:
    converter_problem turns it into the reason auto gives."""


def spark_type(avro: Any) -> tuple[DataType, bool]:
    """An Avro type as a Spark type and whether it is nullable (logical types: their underlying type, as the record
    engine's records hold them)."""
    if isinstance(avro, str):
        if avro in PRIMITIVES:
            return PRIMITIVES[avro], False
        raise UnsupportedSchema(f"Avro type {avro!r} (named-type references are not supported)")
    if isinstance(avro, list):
        branches = [t for t in avro if t != "null"]
        if len(branches) != 1:
            raise UnsupportedSchema(f"Avro union {avro!r} (only a type or null is supported)")
        return spark_type(branches[0])[0], "null" in avro
    if not isinstance(avro, dict) or "type" not in avro:
        raise UnsupportedSchema(f"{avro!r} is not an Avro schema")
    kind = avro["type"]
    if kind == "record":
        return struct_type(avro), False
    if kind == "array":
        items, nullable = spark_type(avro["items"])
        return ArrayType(items, nullable), False
    if kind == "map":
        values, nullable = spark_type(avro["values"])
        return MapType(StringType(), values, nullable), False
    if kind == "enum":
        return StringType(), False
    if kind == "fixed":
        return BinaryType(), False
    return spark_type(kind)


def struct_type(record: dict[str, Any]) -> StructType:
    """An Avro record schema as Spark's columns."""
    fields = []
    for field in record.get("fields", ()):
        data_type, nullable = spark_type(field["type"])
        fields.append(StructField(field["name"], data_type, nullable))
    return StructType(fields)


def source_schema(config: JobConfig) -> dict[str, Any]:
    """The Avro schema of the job's source records (the record engine's extractor's)."""
    kafka = config.source_class == "spark_pipeline.sources.kafka_topic.KafkaTopicSource"
    return kafka_topic.SCHEMA if kafka else synthetic.SCHEMA


def schema_state(config: JobConfig) -> WorkUnitState:
    """The state a converter's convert_schema is asked with on the driver: no work unit's own properties."""
    unit = WorkUnitSpec(work_unit_id="schema", dataset_urn=config.default_dataset_urn, partition="schema",
                        low_watermark=0, expected_high_watermark=0)
    return WorkUnitState(unit, config, "schema", "schema", 1)


def converted_schema(config: JobConfig) -> Schema:
    """The Avro schema the job's record converters output (the source's without converters)."""
    converters = [make_construct(config, CONVERTERS_KEY, p, Converter) for p in config.converter_classes]
    return chain_schema(converters, source_schema(config), schema_state(config))[0]


def converter_problem(config: JobConfig) -> str | None:
    """Why the job's record converters cannot run on the DataFrame engine (None: their output schema is known)."""
    if not config.converter_classes:
        return None
    try:
        schema = converted_schema(config)
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise UnsupportedSchema(f"convert_schema returned {type(schema).__name__}, not an Avro record schema")
        struct_type(schema)
    except Exception as e:  # user code: whatever it raises means its schema is unknown here
        return (f"{CONVERTERS_KEY} ({', '.join(config.converter_classes)}) cannot say its output as an Avro record "
                f"schema Spark can hold: {type(e).__name__}: {e}")
    return None
