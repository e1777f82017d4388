"""The DataFrame engine writing into HDFS and S3 (a real HDFS, a real S3-compatible server): Spark's HDFS client and
S3A (hadoop-aws, from the connector cache) write each attempt folder on the store, oncelog's file systems move its
files into the task output and publish them; the same records and files as the records engine, each once."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.errors import ConfigError
from events.job import ENGINE_PROPERTY, JobRunStarted
from events.log import open_log
from events.published import DatasetPublished
from filesystems import urls
from localservers.s3 import LocalS3
from projections.views import RunStatus
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.engines.choice import choose
from spark_pipeline.engines.dataframe.writers import S3A, hadoop_options
from spark_pipeline.engines.select import missing_connectors
from spark_pipeline.jobfile.config import TaskEngineKind
from spark_pipeline.jobfile.paths import absolute_config
from spark_pipeline.jobs import config_from_properties, load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.preflight import preflight
from tests.fault.pipeline_checks import assert_exactly_once, write_job
from tests.remote_fs_plugin import Remote, s3_settings

PARTITIONED = {"writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner",
               "writer.partition.columns": "offset", "writer.partition.timeUnit": "MINUTES",
               "writer.partition.timezone": "UTC", "writer.partition.prefix": "hourly"}
"""Each record's offset taken as minutes since the epoch: 200 records a partition span four hours."""


def run_folder_job(remote: Remote, base: Path, engine: TaskEngineKind, spark: SparkSession
                   ) -> list[tuple[str, str, int | None]]:
    """A time-partitioned synthetic job (`task.engine: auto`, or records) into folders on the store, run once in this
    process; every record published once (assert_exactly_once), and each published file (below the publish folder,
    its time partition, its records) returned."""
    base.mkdir()
    root, url = urls.join(remote.root, engine.value), f"sqlite:///{base / 'events.db'}"
    task_engine = "auto" if engine is TaskEngineKind.DATAFRAME else "records"
    job = write_job(base, url, "full", root=root, **remote.settings, **PARTITIONED, **{"task.engine": task_engine})
    config = load_job_config(job)
    assert preflight(absolute_config(config)) == []  # `oncelog validate` finds nothing
    assert choose(config).kind is engine
    with open_log(url) as log:
        records = InProcessTaskEngine(log.writer, slots=1, sleep=lambda _: None)
        result = JobLauncher(config, spark=spark, log=log,
                             engine=records if engine is TaskEngineKind.RECORDS else None).run()
        assert result.status is RunStatus.COMMITTED, result.error
        events = [e.event for e in log.read()]
    if engine is TaskEngineKind.DATAFRAME:  # what the run recorded: the engine validate chose
        assert [e.properties[ENGINE_PROPERTY] for e in events if isinstance(e, JobRunStarted)] == [engine.value]
    assert_exactly_once(url, base, root=root)
    published = urls.join(root, "published")
    return sorted((f.path[len(published):], f.partition, f.records) for e in events
                  if isinstance(e, DatasetPublished) for f in e.files)


def test_a_partitioned_folder_job_on_a_remote_store_publishes_the_same_files_on_both_engines(
        remote: Remote, tmp_path: Path, spark: SparkSession) -> None:
    """On HDFS, then in a bucket: `auto` runs the job on the DataFrame engine (validate and run agree), every record
    is published once, in the files, time partitions and counts the records engine publishes."""
    on_spark = run_folder_job(remote, tmp_path / "dataframe", TaskEngineKind.DATAFRAME, spark)
    assert on_spark == run_folder_job(remote, tmp_path / "records", TaskEngineKind.RECORDS, spark)
    assert len({partition for _, partition, _ in on_spark}) > 1 and sum(n or 0 for *_, n in on_spark) == 800


def test_spark_writes_with_the_jobs_hadoop_keys_read_as_oncelogs_file_systems_read_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint without `fs.s3a.path.style.access` means path-style requests (as boto3 is set up: filesystems/s3.py);
    `s3://` is S3A; the keys come bare or as `spark.hadoop.…`."""
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)  # the session's HDFS sets it
    job = {"fs.s3a.endpoint": "http://127.0.0.1:9000", "spark.hadoop.fs.s3a.access.key": "me", "other": "x"}
    assert hadoop_options(job, "s3a://bucket/staging") == {
        "fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.access.key": "me", "fs.s3a.path.style.access": "true"}
    assert hadoop_options({**job, "fs.s3a.path.style.access": "false"}, "s3://bucket/staging") == {
        "fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.access.key": "me", "fs.s3a.path.style.access": "false",
        "fs.s3.impl": S3A}
    assert hadoop_options({"dfs.namenode.http-address": "nn:9870"}, "hdfs://nn:8020/staging") == {
        "dfs.namenode.http-address": "nn:9870"}


@pytest.mark.parametrize("root", ["s3a://bucket/jobs", "s3://bucket/jobs", "hdfs://nn:8020/jobs"])
def test_auto_runs_a_job_with_remote_folders_on_the_dataframe_engine(root: str, tmp_path: Path) -> None:
    """Before, `auto` chose records for any remote writer.staging.dir or writer.output.dir (and `dataframe` was
    refused); Spark now writes there itself."""
    job = write_job(tmp_path, f"sqlite:///{tmp_path / 'events.db'}", "full", root)
    choice = choose(load_job_config(job))
    assert choice.kind is TaskEngineKind.DATAFRAME and "remote" not in choice.reason, choice
    forced = config_from_properties({**load_job_config(job).properties, "task.engine": "dataframe"})
    assert choose(forced).kind is TaskEngineKind.DATAFRAME


def test_webhdfs_folders_stay_on_the_records_engine_naming_the_keys(tmp_path: Path) -> None:
    """pyspark's shaded Hadoop client fails every WebHDFS call (ClassNotFoundException:
    org.apache.hadoop.shaded.org.glassfish.jersey.internal.RuntimeDelegateImpl): `auto` keeps such a job on the
    records engine, and `dataframe` is refused naming the keys."""
    job = write_job(tmp_path, f"sqlite:///{tmp_path / 'events.db'}", "full", "webhdfs://nn:9870/jobs")
    choice = choose(load_job_config(job))
    assert choice.kind is TaskEngineKind.RECORDS
    assert "writer.staging.dir and writer.output.dir name webhdfs:// folders" in choice.reason
    forced = config_from_properties({**load_job_config(job).properties, "task.engine": "dataframe"})
    with pytest.raises(ConfigError, match=r"task.engine=dataframe: .*writer.staging.dir and writer.output.dir name "
                                          r"webhdfs://"):
        choose(forced)


def test_under_spark_submit_a_bucket_job_needs_hadoop_aws_given(tmp_path: Path) -> None:
    """spark-submit's JVM is already running, so the cache's hadoop-aws cannot be added: the job names it."""
    bucket = load_job_config(write_job(tmp_path, f"sqlite:///{tmp_path / 'e.db'}", "full", "s3a://bucket/jobs"))
    submitted = {"spark.master": "local[2]", "spark.jars.packages": "org.apache.spark:spark-avro_2.13:4.1.1"}
    assert missing_connectors(bucket, submitted) == ["hadoop-aws"]
    given = {**submitted, "spark.jars": "/opt/hadoop-aws-3.5.0.jar"}
    assert missing_connectors(bucket, given) == []
    hdfs = load_job_config(write_job(tmp_path, f"sqlite:///{tmp_path / 'e.db'}", "full", "hdfs://nn:8020/jobs"))
    assert missing_connectors(hdfs, submitted) == []


def test_a_job_into_s3_scheme_folders_is_written_by_s3a_and_published_once(
        s3: LocalS3, s3_bucket: str, tmp_path: Path, spark: SparkSession) -> None:
    """`s3://bucket/…` folders (oncelog's name for a bucket as good as `s3a://`): Spark writes them through S3A."""
    url, root = f"sqlite:///{tmp_path / 'events.db'}", f"s3://{s3_bucket}/test-{uuid.uuid4().hex}"
    config = load_job_config(write_job(tmp_path, url, "full", root=root, **s3_settings(s3)))
    assert choose(config).kind is TaskEngineKind.DATAFRAME
    result = JobLauncher(config, spark=spark).run()
    assert result.status is RunStatus.COMMITTED, result.error
    assert sum(assert_exactly_once(url, tmp_path, root=root).values()) == 800
