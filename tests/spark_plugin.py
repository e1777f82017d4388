"""Pytest plugin: one real local Spark session for the whole test session (its start-up costs seconds)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_pipeline.engines.spark import spark_session
from spark_pipeline.jobs import config_from_properties

SHORT_LIVED_DRIVER = '--driver-java-options "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" pyspark-shell'
"""How the tests' child processes (`oncelog run` and other commands) start their Spark driver JVM: one that lives
seconds starts markedly faster with C1 alone and the serial collector (an `oncelog run` of the fault tests' job took
14.9 s instead of 22.3 s on 2 cores; the soak and the standalone cluster test set the same options on their jobs).
Through the environment, so every command a test starts inherits it; the test session's own long-lived Spark
session keeps the JVM's defaults."""
SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"


def pytest_configure(config: pytest.Config) -> None:
    """Short-lived driver JVM options for the commands the tests start, unless spark-submit arguments are given."""
    os.environ.setdefault(SUBMIT_ARGS, SHORT_LIVED_DRIVER)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] Spark session; never skipped: a Spark test that cannot get one fails."""
    config = config_from_properties({"job.name": "tests", "source.class": "spark_pipeline.sources.synthetic."
                                        "SyntheticSource", "writer.staging.dir": "/tmp/unused-s",
                                        "writer.output.dir": "/tmp/unused-o",
                                        "data.publisher.final.dir": "/tmp/unused-f",
                                        "spark.master": "local[2]", "spark.ui.enabled": "false"})
    ours = os.environ.get(SUBMIT_ARGS) == SHORT_LIVED_DRIVER  # a session of minutes: the optimizing compiler pays
    if ours:
        del os.environ[SUBMIT_ARGS]
    try:
        session = spark_session(config)
    finally:
        if ours:
            os.environ[SUBMIT_ARGS] = SHORT_LIVED_DRIVER
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
