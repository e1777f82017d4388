"""Pytest plugin: one real local Spark session for the whole test session (its start-up costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_pipeline.engines.spark import spark_session
from spark_pipeline.jobs import config_from_properties


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] Spark session; never skipped: a Spark test that cannot get one fails."""
    config = config_from_properties({"job.name": "tests", "source.class": "spark_pipeline.sources.synthetic."
                                        "SyntheticSource", "writer.staging.dir": "/tmp/unused-s",
                                        "writer.output.dir": "/tmp/unused-o",
                                        "data.publisher.final.dir": "/tmp/unused-f",
                                        "spark.master": "local[2]", "spark.ui.enabled": "false"})
    session = spark_session(config)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
