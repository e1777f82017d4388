"""The Kafka frame's work unit column: each row's unit found by its topic and partition number."""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark_pipeline.sources.kafka_frame import OffsetRange, unit_index


def test_each_row_gets_the_unit_of_its_topic_and_partition(spark: SparkSession) -> None:
    ranges = [OffsetRange(0, "a", 3, 0, 5), OffsetRange(1, "b", 0, 0, 5), OffsetRange(2, "a", 0, 7, 9),
              OffsetRange(3, "b", 11, 0, 1)]
    rows = [("a", 3), ("b", 0), ("a", 0), ("b", 11), ("a", 3)]
    frame = spark.createDataFrame(rows, "topic string, partition int")
    assert [r[0] for r in frame.select(unit_index(ranges)).collect()] == [0, 1, 2, 3, 0]
    one_topic = [OffsetRange(5, "a", 2, 0, 1), OffsetRange(4, "a", 0, 0, 1)]
    assert [r[0] for r in frame.where("topic = 'a' AND partition = 0").select(unit_index(one_topic)).collect()] == [4]
