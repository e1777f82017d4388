"""Pytest plugin: one real local Spark session for the whole test session (its start-up costs seconds)."""

from __future__ import annotations

import os
import shutil
import tempfile
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
SCRATCH = "ONCELOG_TESTS_SPARK_SCRATCH"
"""The test run's folder for its Spark drivers' scratch files (made by the first process, inherited by the rest)."""
OURS: dict[str, str] = {}
"""The spark-submit arguments this plugin set (empty if they were given): "short" for commands, "long" for the
session's own Spark; "scratch", the drivers' scratch folder, when this process made it (and so removes it)."""


def pytest_configure(config: pytest.Config) -> None:
    """Short-lived driver JVM options for the commands the tests start, unless spark-submit arguments are given; the
    class archive they use made in the background by the first process (xdist's controller), if missing. Every driver's
    scratch files (Spark's local dir, the JVM's temporary files) go under one folder of the test run, removed at its
    end: the drivers the fault tests kill cannot remove their own, and under /tmp they would pile up run after run."""
    archive = archive_path()
    inherited = os.environ.get(SCRATCH)
    scratch = inherited or tempfile.mkdtemp(prefix="oncelog-tests-spark-")
    shared = f"-XX:SharedArchiveFile={archive} {QUIET} -Djava.io.tmpdir={scratch}"
    local_dir = f"--conf spark.local.dir={scratch}"
    short = f'{local_dir} --driver-java-options "{SHORT_LIVED_JVM} {shared}" pyspark-shell'
    if os.environ.get(SUBMIT_ARGS, short) != short:
        if not inherited:
            os.rmdir(scratch)
        return  # the caller's own
    OURS.update(short=short, long=f'{local_dir} --driver-java-options "{shared}" pyspark-shell')
    os.environ[SUBMIT_ARGS] = short
    if not inherited:
        os.environ[SCRATCH] = OURS["scratch"] = scratch
    if not hasattr(config, "workerinput"):
        start_making(archive, SHORT_LIVED_JVM)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's scratch folder removed by the process that made it (xdist's controller: its workers have ended)."""
    scratch = OURS.get("scratch")
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


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
