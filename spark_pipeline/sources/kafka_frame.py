"""The Kafka topic source's work units as one DataFrame (its DataFrameReader): one read of Spark's Kafka batch reader
with `assign` and exact starting / ending offsets per partition from each work unit's low and expected high
watermark, `failOnDataLoss` on, security from spark_kafka.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from events.job import WorkUnitSpec
from spark_pipeline.constructs import UNIT_COLUMN
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.sources import kafka_topic
from spark_pipeline.spark_kafka import job_kafka_options

FETCH_WAIT_MS = 5
"""`kafka.fetch.max.wait.ms` of the batch read. Spark's reader fetches once more at the end of a range, and a range
that ends at the log's end (every run's) makes the broker hold that fetch for its 500 ms default, per partition:
2.9 s against 0.8 s for 10,000 records in 8 partitions on 2 cores. A bounded read has nothing to wait for."""
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
        F.element_at(F.create_map(*indexes), key).alias(UNIT_COLUMN))
