"""The synthetic source's work units as one DataFrame (its DataFrameReader): a row per work unit exploded into its
offsets, computing in Spark SQL exactly the records `synthetic_record` gives, with the failure hook as raise_error.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from events.job import WorkUnitSpec
from spark_pipeline.constructs import UNIT_COLUMN

if TYPE_CHECKING:
    from spark_pipeline.sources.synthetic import SyntheticSettings

UNIT_COLUMNS = "slot INT, _wu INT, dataset STRING, partition INT, unit_partition STRING, low BIGINT, high BIGINT, " \
               "fail_at BIGINT"
"""A synthetic work unit as a row: its slot (0..n-1 among the live units), index in the task, coordinates, range,
and the offset its failure hook fails at (null: none)."""
UNITS_PER_CORE = 2
"""Spark partitions of a synthetic read per core (fewer when there are fewer units): each unit lies in one."""


def synthetic_frame(spark: SparkSession, settings: SyntheticSettings, live: Sequence[tuple[int, WorkUnitSpec]],
                    attempt: int) -> DataFrame:
    """Every live work unit's synthetic records in one frame, computing in Spark SQL exactly the records
    `synthetic_record` gives, with the source's failure hook as raise_error. One row per unit (a broadcast table)
    joined to a `spark.range` of slots, so that each unit lies in one Spark partition (its one file) and no frame is
    built per unit (200 units, one frame each: 10 s of plan building)."""
    rows = [(slot, index, u.dataset_urn, int(u.properties["synthetic.partition"]), u.partition, u.low_watermark,
             u.expected_high_watermark, fail_offset(settings, u, attempt)) for slot, (index, u) in enumerate(live)]
    units = unit_rows(spark, rows)
    slices = max(1, min(len(rows), UNITS_PER_CORE * spark.sparkContext.defaultParallelism))
    slots = spark.range(0, len(rows), 1, numPartitions=slices).withColumnRenamed("id", "slot")
    exploded = slots.join(F.broadcast(units), "slot").select(
        "*", F.explode(F.sequence(F.col("low"), F.col("high") - 1)).alias("at"))
    message = F.format_string("injected failure at offset %d of %s (attempt %d)", F.col("fail_at"),
                              F.col("unit_partition"), F.lit(attempt))
    offset = F.when(F.col("at") == F.col("fail_at"), F.raise_error(message).cast("long")).otherwise(F.col("at"))
    if settings.records_per_second:
        offset = paced(offset, F.col("low"), settings.records_per_second)
    coordinates = F.concat_ws("/", F.lit(str(settings.seed)), F.col("dataset"), F.col("partition").cast("string"),
                              offset.cast("string"))
    checksum = F.crc32(coordinates.cast("binary"))
    hex8 = F.lpad(F.lower(F.hex(checksum)), 8, "0")
    payload = F.substring(F.repeat(hex8, settings.payload_bytes // 8 + 1), 1, settings.payload_bytes)
    return exploded.select(F.col("dataset"), F.col("partition"), offset.alias("offset"),
                           (checksum % 100_000).cast("long").alias("amount"), payload.alias("payload"),
                           F.col(UNIT_COLUMN))


def unit_rows(spark: SparkSession, rows: Sequence[tuple[object, ...]]) -> DataFrame:
    """The work units' rows (UNIT_COLUMNS) as one JSON literal Spark parses: no Python worker starts for them, as one
    would to read a createDataFrame of a local list (about 1.3 s of CPU in each fresh run)."""
    fields = [column.split() for column in UNIT_COLUMNS.split(", ")]
    document = json.dumps([{name: value for (name, _), value in zip(fields, row, strict=True)} for row in rows])
    schema = "array<struct<" + ", ".join(f"{name}: {kind}" for name, kind in fields) + ">>"
    return spark.range(1).select(F.inline(F.from_json(F.lit(document), schema)))


def fail_offset(settings: SyntheticSettings, unit: WorkUnitSpec, attempt: int) -> int | None:
    """The offset at which the source's test hook fails this attempt of the unit, or None."""
    fails = settings.fail_attempts >= attempt and (
        not settings.fail_datasets or unit.dataset_urn in settings.fail_datasets)
    fail_at = unit.low_watermark + settings.fail_after
    return fail_at if fails and fail_at < unit.expected_high_watermark else None


def paced(offset: Column, low_watermark: Column, records_per_second: int) -> Column:
    """`offset`, its row held back so that a work unit yields `records_per_second` (the record engine's throttle:
    a pause every 100 records). The pause is the JVM's Thread.sleep through `reflect`, so no row enters Python."""
    pause_ms = max(1, round(100_000 / records_per_second))
    sleep = F.expr(f"reflect('java.lang.Thread', 'sleep', CAST({pause_ms} AS BIGINT))")
    due = (offset % 100 == 0) & (offset > low_watermark)
    # Thread.sleep returns nothing (reflect gives 'null'): the comparison is never true, but keeps the call in the plan.
    return F.when(due & (sleep == F.lit("never")), F.lit(-1)).otherwise(offset)
