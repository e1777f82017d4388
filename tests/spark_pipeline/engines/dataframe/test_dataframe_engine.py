"""The DataFrame task engine: Spark reads and writes the records, the events and the publish protocol stay the same.

Real Spark (the session fixture, with the connector jars from the cache), real Kafka, real files, a SQLite log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession

from events.errors import ConfigError
from events.job import ENGINE_PROPERTY, REASON_PROPERTY, JobRunStarted
from events.log import open_log
from events.task import TaskFailed, TaskRetried, TaskSucceeded
from filesystems import urls
from projections.projector import Projector
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.engines.choice import choose
from spark_pipeline.engines.dataframe import engine as dataframe_engine
from spark_pipeline.engines.dataframe.engine import DataFrameTaskEngine
from spark_pipeline.engines.dataframe.writers import WriterSettings, write_attempt
from spark_pipeline.jobs import config_from_properties, load_job_config
from spark_pipeline.launcher import JobLauncher, RunResult
from spark_pipeline.sources.kafka_frame import OffsetRange, kafka_frame
from spark_pipeline.sources.synthetic import synthetic_record
from tests.fault.pipeline_checks import (
    DATASETS,
    PARTITIONS,
    RECORDS,
    assert_exactly_once,
    avro_records,
    run_cli,
    write_job,
)
from tests.kafka_plugin import create_topic

pytestmark = [pytest.mark.spark]

KAFKA_SOURCE = "spark_pipeline.sources.kafka_topic.KafkaTopicSource"
SYNTHETIC_SOURCE = "spark_pipeline.sources.synthetic.SyntheticSource"
PAYLOAD = 20


def run(job: Path, spark: SparkSession) -> RunResult:
    """One run of the job, which must commit."""
    result = JobLauncher(load_job_config(job), spark=spark).run()
    assert result.status is RunStatus.COMMITTED, result.error
    return result


def started_properties(log_url: str) -> list[dict[str, str]]:
    """The JobRunStarted properties of every run in the log."""
    with open_log(log_url) as log:
        return [e.event.properties for e in log.read() if isinstance(e.event, JobRunStarted)]


def test_synthetic_job_publishes_the_record_engines_records_exactly_once_with_a_retry(
        tmp_path: Path, spark: SparkSession) -> None:
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    keys: dict[str, Any] = {"task.engine": "dataframe", "source.synthetic.payload.bytes": PAYLOAD,
                            "source.synthetic.fail.attempts": 1, "source.synthetic.fail.after.records": 10}
    job = write_job(tmp_path, log_url, **keys)
    first = run(job, spark)
    run(job, spark)

    watermarks = assert_exactly_once(log_url, tmp_path)
    assert set(watermarks.values()) == {2 * RECORDS} and len(watermarks) == DATASETS * PARTITIONS
    published = avro_records(tmp_path / "published")
    assert len(published) == 2 * RECORDS * DATASETS * PARTITIONS
    for record in published:  # field for field what the record engine's extractor produces
        assert record == synthetic_record(0, record["dataset"], record["partition"], record["offset"], PAYLOAD)
    assert [t.attempts for t in first.tasks] == [2] * len(first.tasks), "attempt 1 failed by the hook, 2 succeeded"
    with open_log(log_url) as log:
        events = [e.event for e in log.read() if e.event.run_id == first.run_id]
    failed = [e for e in events if isinstance(e, TaskFailed)]
    assert {e.attempt for e in failed} == {1} and all("injected failure at offset" in e.error for e in failed)
    assert len([e for e in events if isinstance(e, TaskRetried)]) == len(first.tasks)
    succeeded = [e for e in events if isinstance(e, TaskSucceeded)]
    files = [f for e in succeeded for r in e.results for f in r.output_files]
    assert sorted(Path(f.path).name for f in files) == sorted(
        f"ds.{d}%3A{p}_0-{RECORDS}.avro" for d in range(DATASETS) for p in range(PARTITIONS))
    assert all(f.records == RECORDS and len(f.checksum) == 64 for f in files)
    assert {p[ENGINE_PROPERTY] for p in started_properties(log_url)} == {"dataframe"}


def produce(bootstrap: str, topic: str, partition: int, values: list[str], transactional: bool = False,
            commit: bool = True) -> None:
    """Produce values to one partition, plain or in one transaction (committed or aborted: a control record)."""
    settings = {"bootstrap.servers": bootstrap}
    if transactional:
        settings["transactional.id"] = f"tx-{topic}-{partition}-{len(values)}-{commit}"
    producer = Producer(settings)
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value.encode(), key=value.encode(), partition=partition)
    if not transactional:
        assert producer.flush(30) == 0
    elif commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)
        producer.abort_transaction(30)


def kafka_job(job: Path) -> Path:
    """The job file without the synthetic source's keys (a Kafka job must not name them)."""
    keys = yaml.safe_load(job.read_text())
    job.write_text(yaml.safe_dump({k: v for k, v in keys.items() if not k.startswith("source.synthetic.")}))
    return job


def refuse_observe(*_: object) -> None:
    """DataFrame.observe, refused: the job at hand must count its records from its files."""
    raise AssertionError("observed while writing, although the files count the records")


@pytest.mark.kafka
def test_kafka_job_reads_exact_offsets_and_skips_an_aborted_batch(kafka_bootstrap: str, tmp_path: Path,
                                                                   spark: SparkSession,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DataFrame, "observe", refuse_observe)  # Avro files count their records: nothing observed
    layouts: list[bool] = []

    def noting_layout(frame: DataFrame, settings: WriterSettings, folder: str, hadoop: Mapping[str, str],
                      unit_folders: bool = True) -> None:
        layouts.append(unit_folders)
        write_attempt(frame, settings, folder, hadoop, unit_folders=unit_folders)

    monkeypatch.setattr(dataframe_engine, "write_attempt", noting_layout)
    topic = create_topic(kafka_bootstrap, 2, "dataframe")
    produce(kafka_bootstrap, topic, 0, ["p0-a", "p0-b", "p0-c"])  # offsets 0-2
    produce(kafka_bootstrap, topic, 1, ["c0", "c1"], transactional=True)  # 0-1, commit marker 2
    produce(kafka_bootstrap, topic, 1, ["aborted"], transactional=True, commit=False)  # 3, abort marker 4
    produce(kafka_bootstrap, topic, 1, ["c2"], transactional=True)  # 5, commit marker 6
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    job = kafka_job(write_job(tmp_path, log_url, **{"job.name": "kafka-df", "source.class": KAFKA_SOURCE,
                                                    "kafka.brokers": kafka_bootstrap, "topic.whitelist": topic,
                                                    "task.engine": "dataframe"}))
    run(job, spark)
    produce(kafka_bootstrap, topic, 0, ["p0-d", "p0-e"])  # 3-4: the second run reads only these
    run(job, spark)

    assert layouts == [False, False], "each file named by its first record: no work unit folders, no sort"
    records = avro_records(tmp_path / "published")
    assert Counter((r["partition"], r["offset"]) for r in records) == Counter(
        [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (1, 5)]), "exact offsets, each once"
    assert all("_wu" not in r for r in records)
    assert sorted(r["value"].decode() for r in records) == ["c0", "c1", "c2", "p0-a", "p0-b", "p0-c", "p0-d", "p0-e"]
    assert all(r["topic"] == topic and r["key"] == r["value"] and r["timestamp"] > 1e12 for r in records)
    with open_log(log_url) as log:
        report = verify(log, tmp_path / "published")
        state, _ = Projector(log).rebuild(use_snapshot=False)
        events = [e.event for e in log.read()]
    assert report.ok, report.violations
    read = [(r.dataset_urn, r.records_extracted, r.records_written, [f.records for f in r.output_files])
            for e in events if isinstance(e, TaskSucceeded) for r in e.results]
    assert sorted(read) == [(f"{topic}.0", 2, 2, [2]), (f"{topic}.0", 3, 3, [3]), (f"{topic}.1", 3, 3, [3])], \
        "the records of each file, markers and the aborted record not counted"
    # Partition 0: the last offset written + 1; partition 1: past its trailing commit marker, as the record engine.
    assert {urn: view.watermarks for urn, view in state.dataset_states("kafka-df").items()} == {
        f"{topic}.0": {f"{topic}:0": 5}, f"{topic}.1": {f"{topic}:1": 7}}


@pytest.mark.kafka
def test_a_kafka_batch_read_in_oncelogs_session_is_kafkas_v2_scan(kafka_bootstrap: str, spark: SparkSession) -> None:
    topic = create_topic(kafka_bootstrap, 1, "v2scan")
    produce(kafka_bootstrap, topic, 0, ["a", "b"])
    frame = kafka_frame(spark, {"kafka.bootstrap.servers": kafka_bootstrap}, [OffsetRange(0, topic, 0, 0, 2)])
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "BatchScan" in plan and "KafkaRelation" not in plan, plan
    assert sorted(r["value"] for r in frame.collect()) == [b"a", b"b"]


def test_parquet_output_job(tmp_path: Path, spark: SparkSession) -> None:
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, log_url, **{"writer.output.format": "parquet", "writer.codec.type": "snappy"})
    run(job, spark)

    files = sorted((tmp_path / "published").rglob("*.parquet"))
    assert [f.name for f in files] == sorted(
        f"ds.{d}%3A{p}_0-{RECORDS}.snappy.parquet" for d in range(DATASETS) for p in range(PARTITIONS))
    rows = spark.read.parquet(*(urls.hadoop_uri(str(f)) for f in files)).collect()  # not on fs.defaultFS
    assert sorted((r.dataset, r.partition, r.offset) for r in rows) == sorted(
        (f"ds.{d}", p, o) for d in range(DATASETS) for p in range(PARTITIONS) for o in range(RECORDS))
    assert all(r.asDict() == synthetic_record(0, r.dataset, r.partition, r.offset, 32) for r in rows)
    with open_log(log_url) as log:
        assert verify(log, tmp_path / "published").ok
    (properties,) = started_properties(log_url)
    assert properties[ENGINE_PROPERTY] == "dataframe" and "task.engine=auto" in properties[REASON_PROPERTY]


def test_auto_runs_a_job_with_a_record_converter_on_the_dataframe_engine_through_the_arrow_adapter(
        tmp_path: Path, spark: SparkSession) -> None:
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    converter = "spark_pipeline.examples.converters.AmountInCents"
    keys: dict[str, Any] = {"converter.classes": converter, "source.synthetic.records.per.run": 5}
    job = write_job(tmp_path, log_url, **keys)
    launcher = JobLauncher(load_job_config(job), spark=spark)
    assert isinstance(launcher.engine, DataFrameTaskEngine)
    launcher.run()

    (properties,) = started_properties(log_url)
    assert properties[ENGINE_PROPERTY] == "dataframe"
    assert properties[REASON_PROPERTY] == "task.engine=auto: every construct of the job has a DataFrame stage"
    published = avro_records(tmp_path / "published")
    assert len(published) == 5 * DATASETS * PARTITIONS
    assert all(r["amount_cents"] == r["amount"] * 100 for r in published)


def test_auto_runs_a_job_with_a_branch_converter_on_the_records_engine_and_says_why(tmp_path: Path) -> None:
    converter = "spark_pipeline.examples.converters.AmountInCents"
    job = write_job(tmp_path, "sqlite:///unused.db", **{"converter.classes.0": converter})
    launcher = JobLauncher(load_job_config(job))
    assert not isinstance(launcher.engine, DataFrameTaskEngine)
    choice = choose(load_job_config(job))
    assert choice.reason.startswith("task.engine=auto chose records: converter.classes.0 names a branch's record "
                                    "constructs")
    assert converter in choice.reason


def test_asking_for_what_the_dataframe_engine_cannot_do_names_the_key(tmp_path: Path) -> None:
    config = config_from_properties({
        "job.name": "j", "source.class": "spark_pipeline.sources.directory.DirectorySource",
        "source.filebased.data.directory": "hdfs://127.0.0.1:9/in", "writer.staging.dir": str(tmp_path / "s"),
        "writer.output.dir": str(tmp_path / "o"), "data.publisher.final.dir": str(tmp_path / "f"),
        "task.engine": "DataFrame"})
    with pytest.raises(ConfigError, match=r"task.engine=dataframe: .*source.filebased.data.directory=hdfs://.* "
                                          r"remote file system"):
        choose(config)
    with pytest.raises(ConfigError, match="task.engine"):
        config_from_properties({**config.properties, "task.engine": "spark"})
    synthetic = {k: v for k, v in config.properties.items() if not k.startswith("source.")}
    with pytest.raises(ConfigError, match=r"'writer.codec.type': not a codec of PARQUET output .*\(got 'deflate'\)"):
        config_from_properties({**synthetic, "source.class": SYNTHETIC_SOURCE, "writer.output.format": "parquet",
                                "writer.codec.type": "deflate"})


def test_local_folders_stay_local_when_the_default_file_system_is_hdfs(tmp_path: Path) -> None:
    """A cluster's Hadoop configuration names HDFS as the default file system: Spark must still write the attempt to
    the job's local staging folder (given as a file: URI), not to the same path on HDFS."""
    conf = tmp_path / "hadoop-conf"
    conf.mkdir()
    (conf / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name><value>hdfs://127.0.0.1:9</value></property>"
        "</configuration>")
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{"task.engine": "dataframe", "task.maxretries": 0})
    ran = run_cli(job, env={"HADOOP_CONF_DIR": str(conf)})
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert_exactly_once(url, tmp_path)
