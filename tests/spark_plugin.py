"""Pytest plugin: one real local Spark session for the whole test session (its start-up costs seconds)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_pipeline.engines.spark import spark_session
from spark_pipeline.jobs import config_from_properties
from tests.spark_archive import QUIET, archive_path, start_making

SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""How the tests' child processes (`oncelog run` and other commands) start their Spark driver JVM: one that lives
seconds starts markedly faster with C1 alone and the serial collector (an `oncelog run` of the fault tests' job took
14.9 s instead of 22.3 s on 2 cores; the soak and the standalone cluster test set the same options on their jobs),
and with the classes of Spark's driver mapped from an archive (tests/spark_archive.py: 13.1-13.6 s -> 9.1-9.4 s).
Through the environment, so every command a test starts inherits it; the test session's own long-lived Spark
session keeps the JVM's defaults (with the archive)."""
SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"
OURS: dict[str, str] = {}
"""The spark-submit arguments this plugin set (empty if they were given): "short" for commands, "long" for the
session's own Spark."""


def pytest_configure(config: pytest.Config) -> None:
    """Short-lived driver JVM options for the commands the tests start, unless spark-submit arguments are given; the
    class archive they use made in the background by the first process (xdist's controller), if missing."""
    archive = archive_path()
    shared = f"-XX:SharedArchiveFile={archive} {QUIET}"
    short = f'--driver-java-options "{SHORT_LIVED_JVM} {shared}" pyspark-shell'
    if os.environ.get(SUBMIT_ARGS, short) != short:
        return  # the caller's own
    OURS.update(short=short, long=f'--driver-java-options "{shared}" pyspark-shell')
    os.environ[SUBMIT_ARGS] = short
    if not hasattr(config, "workerinput"):
        start_making(archive, SHORT_LIVED_JVM)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] Spark session; never skipped: a Spark test that cannot get one fails."""
    config = config_from_properties({"job.name": "tests", "source.class": "spark_pipeline.sources.synthetic."
                                        "SyntheticSource", "writer.staging.dir": "/tmp/unused-s",
                                        "writer.output.dir": "/tmp/unused-o",
                                        "data.publisher.final.dir": "/tmp/unused-f",
                                        "spark.master": "local[2]", "spark.ui.enabled": "false"})
    ours = bool(OURS) and os.environ.get(SUBMIT_ARGS) == OURS["short"]
    if ours:  # a session of minutes: the optimizing compiler and the default collector pay
        os.environ[SUBMIT_ARGS] = OURS["long"]
    try:
        session = spark_session(config)
    finally:
        if ours:
            os.environ[SUBMIT_ARGS] = OURS["short"]
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
