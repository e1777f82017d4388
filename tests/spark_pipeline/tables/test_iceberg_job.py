"""An Iceberg job's mistakes, found before Spark starts (`oncelog validate`, `run`): each names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_pipeline.jobfile.config import JobConfigError
from spark_pipeline.jobfile.paths import absolute_config
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.launcher import commit_settings
from spark_pipeline.preflight import Finding, preflight


def iceberg_job(base: Path, **keys: str) -> dict[str, str]:
    """A synthetic job publishing into an Iceberg table under `base`; `keys` add, override, or ('') remove keys."""
    job = {"job.name": "ice", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
           "writer.staging.dir": str(base / "staging"), "writer.output.dir": str(base / "task-output"),
           "data.publisher.final.dir": str(base / "warehouse"),
           "data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher",
           "iceberg.table": "lake.events", "writer.output.format": "PARQUET", "task.engine": "dataframe",
           "oncelog.log.url": f"sqlite:///{base / 'log.db'}", **keys}
    return {k: v for k, v in job.items() if v}


@pytest.mark.parametrize(("keys", "key", "says"), [
    ({"writer.output.format": "AVRO"}, "writer.output.format", "publishes Parquet data files"),
    ({"writer.output.format": ""}, "writer.output.format", "missing"),
    ({"iceberg.table": "events"}, "iceberg.table", "namespace.name"),
    ({"iceberg.table": ""}, "iceberg.table", "missing"),
    ({"iceberg.catalog.uri": "/tmp/catalog.db"}, "iceberg.catalog.uri", "no catalog URL"),
    ({"data.publisher.final.dir": "s3a://bucket/warehouse"}, "iceberg.catalog.uri", "cannot live on HDFS or S3"),
    ({"data.publisher.final.dir": "hdfs://nn:8020/warehouse"}, "iceberg.catalog.uri", "cannot live on HDFS or S3"),
    ({"data.publisher.final.dir": "gs://bucket/warehouse"}, "data.publisher.final.dir", "not supported"),
])
def test_a_job_file_mistake_is_refused_naming_its_key(keys: dict[str, str], key: str, says: str,
                                                      tmp_path: Path) -> None:
    with pytest.raises(JobConfigError) as refused:
        config_from_properties(iceberg_job(tmp_path, **keys))
    problems = [p for p in refused.value.problems if key in p.message]
    assert problems and says in problems[0].message, refused.value


def test_a_catalog_that_cannot_be_reached_is_found_before_spark_starts(tmp_path: Path) -> None:
    good = absolute_config(config_from_properties(iceberg_job(tmp_path)))
    assert [f for f in preflight(good) if f.key.startswith(("iceberg", "data.publisher"))] == []
    bad = absolute_config(config_from_properties(iceberg_job(
        tmp_path, **{"iceberg.catalog.uri": "sqlite:////nonexistent-oncelog/catalog.db"})))
    findings = [f for f in preflight(bad) if f.key == "iceberg.catalog.uri"]
    assert findings == [Finding("iceberg.catalog.uri", "'iceberg.catalog.uri': the catalog of Iceberg table "
                                "'lake.events': the catalog file /nonexistent-oncelog/catalog.db cannot be "
                                "created: its folder /nonexistent-oncelog does not exist")]


@pytest.mark.parametrize(("on_executors", "tables_shard"), [("auto", False), ("true", True), ("false", False)])
def test_a_table_job_commits_on_the_driver_unless_told_to_shard(on_executors: str, tables_shard: bool,
                                                                 tmp_path: Path) -> None:
    """Shards would make one snapshot each: a table job's run makes one, however many datasets, unless the job file
    asks for shards; a folder job still shards from `job.commit.executors.min.datasets` datasets on."""
    keys = {"job.commit.on.executors": on_executors, "job.commit.executors.min.datasets": "2"}
    table = absolute_config(config_from_properties(iceberg_job(tmp_path, **keys)))
    folders = absolute_config(config_from_properties(iceberg_job(
        tmp_path, **keys, **{"data.publisher.type": "spark_pipeline.publisher.BaseDataPublisher",
                             "iceberg.table": "", "task.engine": "records"})))
    assert commit_settings(table).in_shards(10_000) is tables_shard
    assert commit_settings(folders).in_shards(10_000) is (on_executors != "false")
