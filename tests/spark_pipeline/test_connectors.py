"""Spark's Kafka and Avro connectors as the project sets them up: resolved into the cache once, then read offline,
and on the classpath of every session `spark_session` starts.

The Spark read runs in a child process: `spark.jars` counts only when a JVM starts, and this process may already run
a Spark session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner

from oncelog.cli import app
from spark_pipeline.connectors import (
    JARS,
    PACKAGES,
    Connector,
    SparkConnectorError,
    artifact_of,
    connector_jars,
    fetch_connectors,
    spark_shipped_artifacts,
    version_dir,
    with_connectors,
)
from spark_pipeline.engines.spark import spark_session
from spark_pipeline.jobs import config_from_properties
from tests.kafka_plugin import create_topic

RECORDS = 1_000
# Per partition, [start, end): exact offsets as a work unit's low and expected high watermarks give them.
RANGES = {0: (100, 400), 1: (0, 50)}
JOB = {"job.name": "connectors", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
       "writer.staging.dir": "/tmp/unused-s", "writer.output.dir": "/tmp/unused-o",
       "data.publisher.final.dir": "/tmp/unused-f", "spark.master": "local[2]", "spark.ui.enabled": "false"}
# A session made by oncelog's spark_session (no --packages, no spark.jars in the job), then a batch read with exact
# offsets, an Avro round trip and a streaming read of the whole topic (the streaming source is where a connector of
# another Spark version breaks first).
_READER = """
import json, sys
from spark_pipeline.engines.spark import spark_session
from spark_pipeline.jobs import config_from_properties
job, bootstrap, topic, ranges, out = sys.argv[1:]
ranges = json.loads(ranges)
spark = spark_session(config_from_properties(json.loads(job)))
df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
      .option("assign", json.dumps({topic: [int(p) for p in ranges]}))
      .option("startingOffsets", json.dumps({topic: {p: r[0] for p, r in ranges.items()}}))
      .option("endingOffsets", json.dumps({topic: {p: r[1] for p, r in ranges.items()}}))
      .option("failOnDataLoss", "true").load()
      .selectExpr("partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"))
df.write.format("avro").save(out + "/batch")
rows = [list(row) for row in spark.read.format("avro").load(out + "/batch").collect()]
(spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
 .option("startingOffsets", "earliest").load().writeStream.format("avro").option("path", out + "/stream")
 .option("checkpointLocation", out + "/checkpoint").trigger(availableNow=True).start().awaitTermination())
streamed = spark.read.format("avro").load(out + "/stream").count()
jars = spark.sparkContext.getConf().get("spark.jars")
spark.stop()
print(json.dumps({"rows": rows, "streamed": streamed, "jars": jars}))
"""


@pytest.fixture(scope="module")
def jars() -> tuple[Path, ...]:
    """The connector jars in the user's cache, fetched by Maven on the first run of all."""
    return fetch_connectors()


def test_the_jars_resolve_into_the_cache_without_what_spark_ships(jars: tuple[Path, ...]) -> None:
    names = {artifact_of(jar.name) for jar in jars}
    assert {"spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13", "spark-avro_2.13",
            "kafka-clients", "hadoop-aws", "s3", "s3-transfer-manager", "sts"} <= names
    assert "bundle" not in names  # the AWS SDK's 686 MB bundle: its modules S3A uses instead
    assert names.isdisjoint(spark_shipped_artifacts())
    assert all(jar.parent == version_dir() / "libs" and zipfile.is_zipfile(jar) for jar in jars)
    assert connector_jars() == jars  # offline, from the cache


def test_oncelog_spark_jars_prints_one_jars_line_of_existing_files(jars: tuple[Path, ...]) -> None:
    result = CliRunner().invoke(app, ["spark", "jars"])
    assert result.exit_code == 0, result.output
    flag, value = result.stdout.rstrip("\n").split(" ")
    assert flag == "--jars" and "\n" not in result.stdout.rstrip("\n")
    printed = tuple(Path(path) for path in value.split(","))
    assert printed == jars and all(path.is_absolute() and path.is_file() for path in printed)


@pytest.mark.kafka
@pytest.mark.spark
def test_a_session_of_spark_session_reads_kafka_exactly_and_streams_through_the_cached_connectors(
        jars: tuple[Path, ...], kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = create_topic(kafka_bootstrap, 2, "connectors")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    done = subprocess.run([sys.executable, "-c", _READER, json.dumps(JOB), kafka_bootstrap, topic,
                           json.dumps(RANGES), str(tmp_path / "avro")],
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, "\n".join(line for line in done.stderr.splitlines()
                                           if not line.lstrip().startswith("at "))[-3000:]  # no JVM stack frames
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["jars"] == ",".join(map(str, jars))
    rows = {tuple(row) for row in read["rows"]}
    # Partition p holds records p, p+2, p+4…: offset o of partition p is record 2*o + p.
    assert rows == {(p, o, f"k{2 * o + p}", f"v{2 * o + p}") for p, (start, end) in RANGES.items()
                    for o in range(start, end)}
    assert read["streamed"] == RECORDS


def test_a_session_gets_the_connectors_the_job_does_not_give_after_its_own_jars(
        jars: tuple[Path, ...], tmp_path: Path) -> None:
    cached = [str(jar) for jar in jars]
    avro = [jar for jar in cached if Connector.of_jar(Path(jar).name) is Connector.AVRO]
    assert len(avro) == 1 and with_connectors({}, jvm_running=False)[JARS] == ",".join(cached)
    assert with_connectors({JARS: "/opt/mine.jar"}, jvm_running=False)[JARS] == ",".join(["/opt/mine.jar", *cached])
    s3 = [jar for jar in cached if Connector.of_jar(Path(jar).name) is Connector.S3]
    assert {Path(jar).name for jar in s3} >= {"hadoop-aws-3.5.0.jar", "s3-2.35.4.jar", "sts-2.35.4.jar"}
    assert not any(Path(jar).name.startswith(("kafka-clients", "spark-")) for jar in s3)
    kafka_given = {PACKAGES: "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"}
    assert with_connectors(kafka_given, jvm_running=False) == {**kafka_given, JARS: ",".join(
        jar for jar in cached if jar in avro or jar in s3)}
    # Everything given (or spark-submit's JVM already running): the cache is not even read.
    both = {PACKAGES: "org.apache.spark:spark-avro_2.13:4.1.1,org.apache.hadoop:hadoop-aws:3.5.0",
            JARS: "/x/spark-sql-kafka-0-10_2.13-4.2.0.jar"}
    assert with_connectors(both, jvm_running=False, cache_dir=tmp_path) == both
    assert with_connectors({}, jvm_running=True, cache_dir=tmp_path) == {}


def test_spark_session_without_the_cached_jars_names_them_and_the_command_before_starting_spark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCELOG_CACHE", str(tmp_path))
    with pytest.raises(SparkConnectorError, match=r"spark-sql-kafka-0-10 .*spark-avro .*are not in "
                                                  r".*run `oncelog spark jars`"):
        spark_session(config_from_properties(JOB))


def test_a_missing_or_damaged_jar_is_named_with_the_command_that_fetches_it(
        jars: tuple[Path, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SparkConnectorError, match=r"are not in .*run `oncelog spark jars`"):
        connector_jars(tmp_path)
    shutil.copytree(version_dir(), version_dir(tmp_path))
    libs = version_dir(tmp_path) / "libs"
    avro = next(libs.glob("spark-avro_*.jar"))
    avro.unlink()
    with pytest.raises(SparkConnectorError, match=rf"{avro.name} is missing .*`oncelog spark jars`"):
        connector_jars(tmp_path)
    kafka_clients = next(libs.glob("kafka-clients-*.jar"))
    kafka_clients.write_bytes(kafka_clients.read_bytes()[:1000])  # an interrupted copy
    with pytest.raises(SparkConnectorError, match=rf"{kafka_clients.name} is damaged .*`oncelog spark jars`"):
        connector_jars(tmp_path)
    monkeypatch.setenv("ONCELOG_CACHE", str(tmp_path))
    repaired = CliRunner().invoke(app, ["spark", "jars"])  # the command the error names fixes the cache
    assert repaired.exit_code == 0, repaired.output
    assert connector_jars(tmp_path) == tuple(libs / jar.name for jar in jars)
