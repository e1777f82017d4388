"""The synthetic source's DataFrame: its work units reach Spark as a literal, so reading them starts no Python
worker."""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark_pipeline.sources.synthetic_frame import unit_rows

ROWS = [(0, 3, "ds.1", 0, "ds.1:0", 0, 3, None), (1, 4, 'ds."2', 1, "ds.2:1", 5, 9, 6)]


def test_the_units_are_a_literal_spark_parses_not_a_python_rdd(spark: SparkSession) -> None:
    frame = unit_rows(spark, ROWS)
    plan = frame._jdf.queryExecution().analyzed().toString()
    assert "LogicalRDD" not in plan and "ExistingRDD" not in plan, plan
    assert [tuple(row) for row in frame.collect()] == ROWS
    assert frame.dtypes == [("slot", "int"), ("_wu", "int"), ("dataset", "string"), ("partition", "int"),
                            ("unit_partition", "string"), ("low", "bigint"), ("high", "bigint"), ("fail_at", "bigint")]
