"""A task's work units as one DataFrame: the source's record columns plus `_wu`, the work unit's index in the task.

Synthetic: a row per work unit exploded into its offsets, computing in Spark SQL exactly the records
`synthetic_record` gives.
Directory: Spark's reader for the format on exactly each work unit's file (files.py).
Kafka: one read of Spark's Kafka batch reader with `assign` and exact starting / ending offsets per partition from
each work unit's low and expected high watermark, `failOnDataLoss` on, security from spark_kafka.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from events.errors import ConfigError
from events.job import WorkUnitSpec
from spark_pipeline.engines.choice import SourceKind
from spark_pipeline.engines.dataframe import files
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.sources import kafka_topic, synthetic
from spark_pipeline.sources.synthetic import SyntheticSettings, SyntheticSource
from spark_pipeline.spark_kafka import job_kafka_options

FETCH_WAIT_MS = 5
"""`kafka.fetch.max.wait.ms` of the batch read. Spark's reader fetches once more at the end of a range, and a range
that ends at the log's end (every run's) makes the broker hold that fetch for its 500 ms default, per partition:
2.9 s against 0.8 s for 10,000 records in 8 partitions on 2 cores. A bounded read has nothing to wait for."""
UNIT = "_wu"
"""The column holding a row's work unit index in its task (a folder of the staged write, never in the files)."""


def source_kind(config: JobConfig) -> SourceKind:
    """The job's source as one the engine reads; a ConfigError naming source.class otherwise."""
    try:
        return SourceKind(config.source_class)
    except ValueError as e:
        raise ConfigError(f"source.class={config.source_class} has no DataFrame reader") from e


def record_schema(config: JobConfig, units: Sequence[WorkUnitSpec] = ()) -> str | None:
    """The Avro schema (JSON) of the source's records, the record engine's; None when Spark derives it from the
    columns (formats only Spark reads). The directory's `avro` format takes it from the run's `units`."""
    kind = source_kind(config)
    if kind is SourceKind.DIRECTORY:
        return files.avro_schema(config, units)
    return json.dumps(synthetic.SCHEMA if kind is SourceKind.SYNTHETIC else kafka_topic.SCHEMA)


def read_units(spark: SparkSession, config: JobConfig, units: Sequence[WorkUnitSpec], attempt: int
               ) -> DataFrame | None:
    """The records of `units` (non-empty ranges only) as one DataFrame with a `_wu` column; None if none has any."""
    live = [(i, u) for i, u in enumerate(units) if u.expected_high_watermark > u.low_watermark]
    if not live:
        return None
    kind = source_kind(config)
    if kind is SourceKind.SYNTHETIC:
        settings: SyntheticSettings = SyntheticSource(config).settings()
        return synthetic_frame(spark, settings, live, attempt)
    if kind is SourceKind.DIRECTORY:
        directory = files.directory_settings(config)
        return union_all([files.file_frame(spark, directory, u).withColumn(UNIT, F.lit(i)) for i, u in live])
    return kafka_frame(spark, config, live)


def union_all(frames: Sequence[DataFrame]) -> DataFrame:
    """The frames' union by column name, built as a balanced tree: a chain of N unions nests N deep and Spark
    analyses the growing plan at every step; a tree keeps the depth logarithmic."""
    while len(frames) > 1:
        frames = [reduce(DataFrame.unionByName, frames[i:i + 2]) for i in range(0, len(frames), 2)]
    return frames[0]


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
    units = spark.createDataFrame(rows, UNIT_COLUMNS)
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
                           F.col(UNIT))


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


def kafka_frame(spark: SparkSession, config: JobConfig, live: Sequence[tuple[int, WorkUnitSpec]]) -> DataFrame:
    """One Kafka batch read of exactly the planned offsets of every work unit, as the record engine's records."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    indexes: list[Column] = []
    for index, unit in live:
        topic, partition = unit.properties[kafka_topic.TOPIC], int(unit.properties[kafka_topic.PARTITION])
        assign.setdefault(topic, []).append(partition)
        starting.setdefault(topic, {})[str(partition)] = unit.low_watermark
        ending.setdefault(topic, {})[str(partition)] = unit.expected_high_watermark
        indexes += [F.lit(f"{topic}:{partition}"), F.lit(index)]
    reader = (spark.read.format("kafka").options(**job_kafka_options(config))
              .option("kafka.fetch.max.wait.ms", str(FETCH_WAIT_MS)).option("assign", json.dumps(assign))
              .option("startingOffsets", json.dumps(starting))
              .option("endingOffsets", json.dumps(ending)).option("failOnDataLoss", "true"))
    key = F.concat(F.col("topic"), F.lit(":"), F.col("partition").cast("string"))
    return reader.load().select(
        "topic", F.col("partition").cast("int").alias("partition"), F.col("offset").cast("long").alias("offset"),
        F.unix_millis(F.col("timestamp")).alias("timestamp"), "key", "value",
        F.element_at(F.create_map(*indexes), key).alias(UNIT))
