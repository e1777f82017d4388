"""A task's work units as one DataFrame, through its Source's DataFrameReader capability (constructs.py): the
records' columns plus UNIT_COLUMN, the work unit's index in the task.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from events.errors import ConfigError
from events.job import WorkUnitSpec
from spark_pipeline.constructs import DataFrameReader, Source
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobfile.plugins import make_construct


def frame_reader(config: JobConfig) -> DataFrameReader:
    """The job's source as a DataFrameReader; a ConfigError naming source.class when it is none."""
    source = make_construct(config, "source.class", config.source_class, Source)
    if not isinstance(source, DataFrameReader):
        raise ConfigError(f"source.class={config.source_class} has no DataFrame reader (DataFrameReader)")
    return source


def read_units(spark: SparkSession, config: JobConfig, units: Sequence[WorkUnitSpec], attempt: int
               ) -> DataFrame | None:
    """The records of `units` (non-empty ranges only) as one DataFrame; None if none has any."""
    live = [(i, u) for i, u in enumerate(units) if u.expected_high_watermark > u.low_watermark]
    if not live:
        return None
    return frame_reader(config).read_frame(spark, live, attempt)
