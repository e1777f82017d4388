"""Mistakes found before Spark starts: `validate` and `run` name the key and the file of a missing input folder, an
unreachable HDFS, Kafka or S3, S3 without credentials or bucket, staging and output on two file systems; a run with
nothing to do is recorded without Spark. The CLI runs with JAVA_HOME pointing nowhere: a JVM could not start, so a
refusal in our words (or a committed run) proves that none was started."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pyspark.sql import DataFrame

from spark_pipeline.jobfile.config import JobConfig, JobConfigError
from spark_pipeline.jobfile.paths import absolute_config
from spark_pipeline.jobfile.plugins import import_class
from spark_pipeline.jobs import config_from_properties, load_job
from spark_pipeline.preflight import Finding, preflight
from spark_pipeline.sources.kafka_topic import KafkaTopicSource

ROOT = Path(__file__).parents[2]
DIRECTORY_SOURCE = "spark_pipeline.sources.directory.DirectorySource"


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound by this test and never listened on: every connection to it is refused at once."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def no_jvm_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI process that cannot start a JVM, without AWS credentials or profiles."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYSPARK_", "SPARK_"))}
    return {**env, "JAVA_HOME": "/nonexistent-java", "AWS_EC2_METADATA_DISABLED": "true", **extra}


def oncelog(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, its output piped."""
    return subprocess.run([sys.executable, "-m", "oncelog", *args], cwd=cwd, env=env or no_jvm_env(),
                          capture_output=True, text=True, timeout=120, check=False)


def write(path: Path, keys: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(keys, sort_keys=False))
    return path


def line_of(path: Path, key: str) -> int:
    """The line a key is set on in a YAML job file."""
    return next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(f"{key}:"))


def test_a_missing_input_folder_and_a_silent_namenode_are_named_by_validate_and_refused_by_run_without_a_jvm(
        tmp_path: Path, closed_port: int) -> None:
    hdfs = f"hdfs://127.0.0.1:{closed_port}/jobs"
    job = write(tmp_path / "job.yaml", {
        "job.name": "files", "source.class": DIRECTORY_SOURCE, "source.filebased.data.directory": "incoming",
        "writer.staging.dir": f"{hdfs}/staging", "writer.output.dir": f"{hdfs}/output",
        "data.publisher.final.dir": f"{hdfs}/published", "dfs.namenode.http-address": f"127.0.0.1:{closed_port}"})

    checked = oncelog(tmp_path, "validate", str(job))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0] == f"INVALID  {job} (4 problems)"
    assert f"  {job}:{line_of(job, 'source.filebased.data.directory')}: 'source.filebased.data.directory' " \
           f"{tmp_path / 'incoming'}: no such folder" in lines
    for key in ("writer.staging.dir", "writer.output.dir", "data.publisher.final.dir"):
        assert any(line.startswith(f"  {job}:{line_of(job, key)}: {key!r} {hdfs}/") and
                   f"no HDFS NameNode answers WebHDFS at http://127.0.0.1:{closed_port}" in line for line in lines)

    refused = oncelog(tmp_path, "run", str(job))  # stderr is a pipe: one problem per line all the same
    assert refused.returncode == 2, refused.stderr
    errors = refused.stderr.splitlines()
    assert errors[0] == "error: the job cannot run (4 problems, found before starting Spark); nothing was run:"
    assert [line.strip() for line in errors[1:]] == [line.strip() for line in lines[1:]]  # validate's problems
    assert "java" not in refused.stderr.lower() and refused.stdout == ""
    assert not (tmp_path / ".oncelog" / "events.db").exists()  # refused before the log was opened


def test_kafka_brokers_that_refuse_connections_and_s3_without_credentials_or_endpoint(
        tmp_path: Path, closed_port: int) -> None:
    bucket = "s3a://landing/kafka"
    job = write(tmp_path / "job.yaml", {
        "job.name": "topics", "source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
        "kafka.brokers": f"127.0.0.1:{closed_port}", "topic.whitelist": "events",
        "writer.staging.dir": f"{bucket}/staging", "writer.output.dir": f"{bucket}/output",
        "data.publisher.final.dir": f"{bucket}/published", "fs.s3a.endpoint": f"http://127.0.0.1:{closed_port}"})

    checked = oncelog(tmp_path, "validate", str(job))
    assert checked.returncode == 1
    problems = checked.stdout.splitlines()[1:]
    assert sum(f"{job}:{line_of(job, k)}: {k!r} {bucket}/" in p and "no S3 credentials: set fs.s3a.access.key"
               in p for k in ("writer.staging.dir", "writer.output.dir", "data.publisher.final.dir")
               for p in problems) == 3, checked.stdout
    assert any(p.startswith(f"  {job}:{line_of(job, 'kafka.brokers')}: every Kafka broker of 127.0.0.1:{closed_port} "
                            f"refuses connections") for p in problems)

    keys = ["--conf", "fs.s3a.access.key=someone", "--conf", "fs.s3a.secret.key=secret"]
    refused = oncelog(tmp_path, "run", str(job), *keys)
    assert refused.returncode == 2
    assert f"no S3 endpoint answers at http://127.0.0.1:{closed_port}" in refused.stderr
    assert "secret" not in refused.stderr.replace("fs.s3a.secret.key", "")  # the credential is never shown
    assert "java" not in refused.stderr.lower()


def test_staging_and_task_output_on_two_file_systems_are_named_by_their_keys(tmp_path: Path) -> None:
    config = absolute_config(config_from_properties({
        "job.name": "split", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "writer.staging.dir": str(tmp_path / "staging"), "writer.output.dir": "s3a://bucket/output",
        "data.publisher.final.dir": "s3a://bucket/published"}))
    moves = [f for f in preflight(config) if "different file systems" in f.message]
    assert moves == [Finding("writer.output.dir", (
        f"'writer.staging.dir' ({tmp_path / 'staging'}) and 'writer.output.dir' (s3a://bucket/output) lie on "
        f"different file systems, and no file system moves files into another (each file a task writes in staging "
        f"is moved to its task output): put both on s3a://bucket"))]


def test_an_s3_bucket_that_does_not_exist_is_named_and_one_that_does_passes(s3_folder: str, tmp_path: Path) -> None:
    missing = f"s3a://no-such-bucket-{uuid.uuid4().hex[:8]}"
    properties = {"job.name": "s3", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
                  "writer.staging.dir": f"{s3_folder}/staging", "writer.output.dir": f"{s3_folder}/output",
                  "data.publisher.final.dir": f"{s3_folder}/published"}
    assert preflight(absolute_config(config_from_properties(properties))) == []
    config = absolute_config(config_from_properties({**properties, "writer.staging.dir": f"{missing}/staging",
                                                     "writer.output.dir": f"{missing}/output",
                                                     "data.publisher.final.dir": f"{missing}/published"}))
    found = preflight(config)
    assert [f.key for f in found] == ["writer.staging.dir", "writer.output.dir", "data.publisher.final.dir"]
    assert all(f"bucket {missing.removeprefix('s3a://')!r} does not exist" in f.message for f in found)


def test_a_run_with_nothing_to_read_is_explained_and_recorded_without_starting_spark(tmp_path: Path) -> None:
    (tmp_path / "incoming").mkdir()
    job = write(tmp_path / "job.yaml", {
        "job.name": "quiet", "source.class": DIRECTORY_SOURCE, "source.filebased.data.directory": "incoming",
        "writer.staging.dir": "work/staging", "writer.output.dir": "work/output",
        "data.publisher.final.dir": "published", "job.commit.policy": "full"})

    explained = oncelog(tmp_path, "run", str(job), "--explain", "--json")  # a fresh SQLite log: no history
    assert explained.returncode == 0, explained.stderr
    assert json.loads(explained.stdout)["tasks"] == []

    ran = oncelog(tmp_path, "run", str(job), "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["status"] == "COMMITTED"
    runs = oncelog(tmp_path, "runs", "--json")
    assert [(r["job"], r["status"]) for r in json.loads(runs.stdout)["runs"]] == [("quiet", "COMMITTED")]


def test_a_gobblin_kafka_source_class_is_refused_with_oncelogs_own_source_named(tmp_path: Path) -> None:
    pull = tmp_path / "events.pull"
    pull.write_text("job.name=events\n"
                    "source.class=org.apache.gobblin.source.extractor.extract.kafka.KafkaSimpleSource\n"
                    "writer.staging.dir=/tmp/s\nwriter.output.dir=/tmp/o\ndata.publisher.final.dir=/tmp/f\n")
    with pytest.raises(JobConfigError) as refused:
        load_job(pull)
    [problem] = refused.value.problems
    assert problem.key == "source.class" and problem.line == 2
    named = problem.message.rpartition("oncelog's source for it is ")[2]
    assert import_class(named) is KafkaTopicSource


SYNTHETIC = "spark_pipeline.sources.synthetic.SyntheticSource"


def renamed(frame: DataFrame) -> DataFrame:
    """A DataFrame function: its output columns are known to Spark only."""
    return frame.withColumnRenamed("amount", "nothing")


def sql_findings(keys: dict[str, str]) -> list[Finding]:
    """The pre-flight findings about a job's SQL (no other check: the job has no folders to probe)."""
    folders = {key: f"/tmp/oncelog-sql-check/{key}" for key in
               ("writer.staging.dir", "writer.output.dir", "data.publisher.final.dir")}  # never written: probed only
    config = config_from_properties({"job.name": "sql", "source.class": SYNTHETIC, **folders, **keys})
    return [f for f in preflight(config) if f.key in ("converter.sql.select", "qualitychecker.row.sql")]


def test_validate_names_the_job_file_the_key_and_a_misspelt_sql_column_without_a_jvm(tmp_path: Path) -> None:
    job = write(tmp_path / "job.yaml", {
        "job.name": "shop", "source.class": SYNTHETIC, "dataset.urn": "shop", "writer.staging.dir": "staging",
        "writer.output.dir": "output", "data.publisher.final.dir": "published",
        "converter.sql.select": "dataset, offset, amout * 100 AS amount_cents, upper(payload) AS code",
        "qualitychecker.row.sql": "amount_cent >= 0 AND code IS NOT NULL"})

    checked = oncelog(tmp_path, "validate", str(job))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[0] == f"INVALID  {job} (2 problems)"
    assert (f"  {job}:{line_of(job, 'converter.sql.select')}: converter.sql.select 'dataset, offset, amout * 100 AS "
            f"amount_cents, upper(payload) AS code' names the column 'amout', which the records do not have (did you "
            f"mean 'amount'?); the columns: dataset, partition, offset, amount, payload") in checked.stdout.splitlines()
    assert (f"  {job}:{line_of(job, 'qualitychecker.row.sql')}: qualitychecker.row.sql 'amount_cent >= 0 AND code "
            f"IS NOT NULL' names the column 'amount_cent', which the records after converter.sql.select do not have "
            f"(did you mean 'amount_cents'?); the columns: dataset, offset, amount_cents, code") \
        in checked.stdout.splitlines()


def test_sql_columns_are_checked_where_the_records_columns_are_known_and_only_there(tmp_path: Path) -> None:
    # known: the source's schema, its columns through `*`, aliases used later in the list, struct fields, backticks
    assert sql_findings({"converter.sql.select": "*, amount * 100 AS cents, cents + 1 AS more, `records`.payload",
                         "qualitychecker.row.sql": "more > 0 AND PAYLOAD like 'x%' AND exists(array(amount), x -> "
                                                   "x > 0) AND \"a string\" != ''"}) == []
    assert [f.message.split(", which")[0] for f in sql_findings({"qualitychecker.row.sql": "amont > 0 OR bogus"})] \
        == ["qualitychecker.row.sql 'amont > 0 OR bogus' names the column 'amont'",
            "qualitychecker.row.sql 'amont > 0 OR bogus' names the column 'bogus'"]
    # the record converters' output schema (AmountInCents adds amount_cents)
    converted = {"converter.classes": "spark_pipeline.examples.converters.AmountInCents"}
    assert sql_findings({**converted, "qualitychecker.row.sql": "amount_cents > 0"}) == []
    assert [f.key for f in sql_findings({**converted, "qualitychecker.row.sql": "cents > 0"})] \
        == ["qualitychecker.row.sql"]
    # unknown without Spark: nothing said (validate --deep asks Spark)
    assert sql_findings({"converter.sql.select": "upper(payload)", "qualitychecker.row.sql": "nothing > 0"}) == []
    assert sql_findings({"converter.dataframe.functions": f"{__name__}:renamed",
                         "qualitychecker.row.sql": "nothing > 0"}) == []
    assert sql_findings({"qualitychecker.row.sql": "amount IN (SELECT id FROM other)"}) == []
    assert sql_findings({"qualitychecker.row.sql": "amount >="}) == []  # Spark's parser names the syntax error


def test_a_directory_sources_sql_is_checked_against_its_format_or_declared_schema(tmp_path: Path) -> None:
    directory = {"source.class": DIRECTORY_SOURCE, "source.filebased.data.directory": str(tmp_path)}
    lines = sql_findings({**directory, "qualitychecker.row.sql": "length(txt) > 0"})
    assert [f.message.split("; ")[0] for f in lines] == [
        "qualitychecker.row.sql 'length(txt) > 0' names the column 'txt', which the records do not have (did you "
        "mean 'text'?)"]
    csv = {**directory, "source.filebased.format": "csv", "source.filebased.schema": "id BIGINT, name STRING",
           "task.engine": "dataframe"}
    assert [f.message.rsplit("; ", 1)[1] for f in sql_findings({**csv, "converter.sql.select": "id, nam"})] \
        == ["the columns: id, name"]
    assert sql_findings({**directory, "source.filebased.format": "avro", "converter.sql.select": "anything"}) == []


def partition_findings(keys: dict[str, str]) -> list[Finding]:
    """The pre-flight findings about a job's time partitioner (no other check)."""
    partitioned = {"writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedWriterPartitioner",
                   "writer.partition.pattern": "yyyy/MM/dd/HH", **keys}
    return [f for f in preflight(config_from_properties_in(partitioned)) if f.key == "writer.partition.columns"]


def config_from_properties_in(keys: dict[str, str]) -> JobConfig:
    folders = {key: f"/tmp/oncelog-partition-check/{key}" for key in
               ("writer.staging.dir", "writer.output.dir", "data.publisher.final.dir")}  # never written: probed only
    return config_from_properties({"job.name": "hourly", "source.class": SYNTHETIC, **folders, **keys})


def test_validate_names_a_misspelt_partition_column_and_one_that_holds_no_time_without_a_jvm(tmp_path: Path) -> None:
    job = write(tmp_path / "hourly.yaml", {
        "job.name": "hourly", "source.class": SYNTHETIC, "dataset.urn": "clicks", "writer.staging.dir": "staging",
        "writer.output.dir": "output", "data.publisher.final.dir": "published", "task.engine": "records",
        "writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedWriterPartitioner",
        "writer.partition.pattern": "yyyy/MM/dd/HH", "writer.partition.columns": "offsett"})

    checked = oncelog(tmp_path, "validate", str(job), env=no_jvm_env())
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert checked.stdout.splitlines() == [
        f"INVALID  {job} (1 problem)",
        f"  {job}:{line_of(job, 'writer.partition.columns')}: writer.partition.columns: 'offsett' is not a column of "
        f"the records written (did you mean 'offset'?); their columns: 'dataset', 'partition', 'offset', 'amount', "
        f"'payload'"]
    assert [f.message for f in partition_findings({"writer.partition.columns": "payload"})] == [
        "writer.partition.columns: column 'payload' is of Avro type string; a partition column holds a time (a long "
        "or int in writer.partition.timeUnit, a date or a timestamp)"]


def test_partition_columns_are_checked_in_each_branchs_records_where_known_and_only_there() -> None:
    assert partition_findings({"writer.partition.columns": "offset"}) == []
    assert partition_findings({"writer.partition.columns": "nothing,offset"}) == []  # the first one there is used
    # no column and no `timestamp` to fall back to (the synthetic records have none)
    assert [f.message.split(" (")[0] for f in partition_findings({})] == [
        "writer.partition.columns is not set and the records written have no 'timestamp' field"]
    # the record converters' output (AmountInCents adds amount_cents), and a branch's own converters
    converted = {"converter.classes": "spark_pipeline.examples.converters.AmountInCents"}
    assert partition_findings({**converted, "writer.partition.columns": "amount_cents"}) == []
    branches = {"fork.branches": "2", "writer.partition.columns": "amount_cents",
                "converter.classes.1": "spark_pipeline.examples.converters.AmountInCents",
                **{f"{key}.{n}": f"/tmp/oncelog-partition-check/{n}/{key}" for n in (0, 1) for key in
                   ("writer.staging.dir", "writer.output.dir", "data.publisher.final.dir")}}
    assert [f.message.rsplit(", ", 1)[1] for f in partition_findings(branches)] == ["branch 0"]
    # unknown without Spark: nothing said (validate --deep asks Spark)
    assert partition_findings({"converter.sql.select": "dataset, offset", "writer.partition.columns": "nothing"}) == []
