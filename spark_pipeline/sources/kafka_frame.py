"""The Kafka topic source's work units as one DataFrame (its DataFrameReader): one read of Spark's Kafka batch reader
with `assign` and exact starting / ending offsets per partition from each work unit's low and expected high
watermark, `failOnDataLoss` on, the options (brokers, security) from the source's settings (kafka_spark.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_pipeline.constructs import UNIT_COLUMN


@dataclass(frozen=True)
class OffsetRange:
    """A work unit's offsets in one topic partition: [start, end), and its index in the task."""

    unit: int
    topic: str
    partition: int
    start: int
    end: int


FETCH_WAIT_MS = 5
"""`kafka.fetch.max.wait.ms` of the batch read. Spark's reader fetches once more at the end of a range, and a range
that ends at the log's end (every run's) makes the broker hold that fetch for its 500 ms default, per partition:
2.9 s against 0.8 s for 10,000 records in 8 partitions on 2 cores. A bounded read has nothing to wait for."""
def kafka_frame(spark: SparkSession, options: Mapping[str, str], ranges: Sequence[OffsetRange]) -> DataFrame:
    """One Kafka batch read of exactly the given offset ranges, as the record engine's records, each row with its
    range's work unit index."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end
    reader = (spark.read.format("kafka").options(**options)
              .option("kafka.fetch.max.wait.ms", str(FETCH_WAIT_MS)).option("assign", json.dumps(assign))
              .option("startingOffsets", json.dumps(starting))
              .option("endingOffsets", json.dumps(ending)).option("failOnDataLoss", "true"))
    return reader.load().select(
        "topic", F.col("partition").cast("int").alias("partition"), F.col("offset").cast("long").alias("offset"),
        F.unix_millis(F.col("timestamp")).alias("timestamp"), "key", "value", unit_index(ranges).alias(UNIT_COLUMN))


def unit_index(ranges: Sequence[OffsetRange]) -> Column:
    """A row's work unit index: looked up by its partition number in its topic's array of indexes (no string built
    per row: a lookup by "topic:partition" cost 0.13 of the 2 CPU s Spark's task threads spend on 1M records)."""
    by_topic: dict[str, dict[int, int]] = {}
    for r in ranges:
        by_topic.setdefault(r.topic, {})[r.partition] = r.unit
    lookups = {topic: F.element_at(F.array(*[F.lit(units.get(p)).cast("int") for p in range(max(units) + 1)]),
                                   F.col("partition") + 1)
               for topic, units in by_topic.items()}
    (first, lookup), *others = lookups.items()
    if not others:
        return lookup
    chosen = F.when(F.col("topic") == F.lit(first), lookup)
    for topic, other in others:
        chosen = chosen.when(F.col("topic") == F.lit(topic), other)
    return chosen
