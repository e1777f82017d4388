"""The time partitioner on the DataFrame engine: each record's partition folder as a Spark expression (no Python UDF),
built from the same tokens as jobfile/partitions.py formats in Python, so both engines name the same folders.

The event time is the first partition column holding a value, else the record's `timestamp`; its local time in
`writer.partition.timezone` is taken by `from_utc_timestamp` as seconds, and its fields by integer arithmetic on
those seconds (days → a date, the rest of the day → hours, minutes, seconds): nothing depends on Spark's session
time zone.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    DateType,
    IntegerType,
    LongType,
    ShortType,
    StructType,
    TimestampType,
)

from events.errors import ConfigError
from spark_pipeline.constructs import UNIT_COLUMN
from spark_pipeline.jobfile.partitions import (
    COLUMNS_KEY,
    ColumnKind,
    EventColumn,
    Field,
    TimePartitioning,
    event_columns,
)

PARTITION_COLUMN = "_tp"
"""The column holding each record's time partition (Spark's second `partitionBy` column, after the work unit's)."""
SECONDS_PER_DAY = 86_400


def spark_kind(schema: StructType, column: str) -> ColumnKind | str | None:
    """A column's kind in a frame's schema (nested as a.b through structs)."""
    current: DataType = schema
    for name in column.split("."):
        if not isinstance(current, StructType) or name not in current.fieldNames():
            return None
        current = current[name].dataType
    if isinstance(current, (LongType, IntegerType, ShortType, ByteType)):
        return ColumnKind.NUMBER
    if isinstance(current, TimestampType):
        return ColumnKind.MILLIS
    if isinstance(current, DateType):
        return ColumnKind.DAYS
    return f"of Spark type {current.simpleString()}"


def floor_div(value: Column, divisor: int) -> Column:
    """Integer division rounding down (Python's //), for times before 1970 too."""
    return ((value - F.pmod(value, F.lit(divisor))) / F.lit(divisor)).cast("long")


def millis_of(column: EventColumn, partitioning: TimePartitioning, spark_type: ColumnKind) -> Column:
    """A partition column's value as epoch milliseconds (null when it holds none): a date's or a timestamp's own, a
    number's by what the column holds (writer.partition.timeUnit; the record's `timestamp` is milliseconds)."""
    value = F.col(".".join(f"`{name}`" for name in column.path))
    if spark_type is ColumnKind.DAYS:
        return F.unix_date(value).cast("long") * F.lit(86_400_000)
    if spark_type is ColumnKind.MILLIS:
        return F.unix_millis(value)
    number = value.cast("long")
    if column.kind is ColumnKind.NUMBER:
        multiply, divide = partitioning.unit.value
        return floor_div(number * F.lit(multiply), divide) if divide != 1 else number * F.lit(multiply)
    if column.kind is ColumnKind.MICROS:
        return floor_div(number, 1000)
    if column.kind is ColumnKind.DAYS:
        return number * F.lit(86_400_000)
    return number


def partition_expression(partitioning: TimePartitioning, columns: tuple[tuple[EventColumn, ColumnKind], ...],
                         where: Column) -> Column:
    """Each record's partition folder, failing (naming the key and the record) when none of `columns` holds a time."""
    millis = F.coalesce(*[millis_of(c, partitioning, kind) for c, kind in columns])
    names = ", ".join(".".join(c.path) for c, _ in columns)
    missing = F.raise_error(F.concat(F.lit("the record at "), where,
                                     F.lit(f" has no time: none of {names} holds a value ({COLUMNS_KEY})")))
    local = F.unix_seconds(F.from_utc_timestamp(F.timestamp_millis(F.coalesce(millis, missing.cast("long"))),
                                                partitioning.zone))
    day = F.date_from_unix_date(floor_div(local, SECONDS_PER_DAY).cast("int"))
    of_day = F.pmod(local, F.lit(SECONDS_PER_DAY))
    fields = {Field.YEAR: F.year(day), Field.MONTH: F.month(day), Field.DAY: F.dayofmonth(day),
              Field.HOUR: floor_div(of_day, 3600), Field.MINUTE: floor_div(F.pmod(of_day, F.lit(3600)), 60),
              Field.SECOND: F.pmod(of_day, F.lit(60))}
    parts: list[Column] = []
    for token in partitioning.tokens:
        if token.field is None:
            parts.append(F.lit(token.text))
            continue
        value = fields[token.field]
        if token.field is Field.YEAR and token.width == 2:
            value = F.pmod(value, F.lit(100))
        parts.append(F.format_string(f"%0{max(token.width, 1)}d", value.cast("int")))
    middle = F.regexp_replace(F.concat(*parts), "^/+|/+$", "")
    pieces = [F.lit(partitioning.prefix)] if partitioning.prefix else []
    pieces.append(middle)
    if partitioning.suffix:
        pieces.append(F.lit(partitioning.suffix))
    return F.concat_ws("/", *pieces)


def with_partition(frame: DataFrame, partitioning: TimePartitioning, where: Column, dataset: str = "") -> DataFrame:
    """`frame` with each record's time partition in PARTITION_COLUMN; a ConfigError naming the key when the records
    have none of the partition columns (found now: Spark analyses the schema without reading a record)."""
    schema = frame.schema
    try:
        columns = event_columns(partitioning, lambda c: spark_kind(schema, c),
                                [n for n in frame.columns if n != UNIT_COLUMN])
    except ConfigError as e:
        raise ConfigError(f"dataset {dataset!r}: {e}" if dataset else str(e)) from e
    kinds = []
    for column in columns:
        kind = spark_kind(schema, ".".join(column.path))
        kinds.append((column, kind if isinstance(kind, ColumnKind) else ColumnKind.NUMBER))
    return frame.withColumn(PARTITION_COLUMN, partition_expression(partitioning, tuple(kinds), where))
