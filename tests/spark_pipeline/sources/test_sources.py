"""The built-in sources: Kafka topics against the real broker, directories; planned, extracted, and run as jobs.

Jobs run on the session's shared Spark (the `spark` fixture of tests.spark_plugin).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from events.job import WorkUnitSpec
from events.log import open_log
from events.log.kafka.config import CLIENT_DEFAULTS
from projections.state import State
from projections.views import DatasetView, RunStatus
from replay.verify import verify
from spark_pipeline.constructs import (
    MultiWorkUnit,
    Source,
    SourceError,
    SourceState,
    WorkUnitState,
)
from spark_pipeline.engines.records.flow import build_constructs
from spark_pipeline.engines.records.task import run_attempt
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import config_from_properties, load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.sources.directory import (
    COMPLETE,
    SCALE,
    DirectorySource,
    complete,
    position,
)
from spark_pipeline.sources.kafka_topic import LOST, KafkaTopicSource, SourceCluster
from tests.kafka_plugin import create_topic

KAFKA_SOURCE = "spark_pipeline.sources.kafka_topic.KafkaTopicSource"
DIRECTORY_SOURCE = "spark_pipeline.sources.directory.DirectorySource"

# --- helpers -------------------------------------------------------------------------------------------------------


def config_of(source_class: str, **keys: str) -> JobConfig:
    """A job config for planning and extracting only (its writer folders are never created)."""
    folders = {k: f"unused/{k}" for k in ("writer.staging.dir", "writer.output.dir", "data.publisher.final.dir")}
    return config_from_properties({"job.name": "sources-test", "source.class": source_class, **folders, **keys})


def source_state(config: JobConfig, watermarks: dict[str, dict[str, int]] | None = None) -> SourceState:
    """A SourceState whose datasets committed the given watermarks (dataset URN → partition → watermark)."""
    views = {urn: DatasetView(job=config.job_name, dataset_urn=urn, watermarks=dict(marks))
             for urn, marks in (watermarks or {}).items()}
    return SourceState(config, "run-1", views)


def committed(units: list[WorkUnitSpec], highs: dict[str, int] | None = None) -> dict[str, dict[str, int]]:
    """The watermarks a run of these units commits (each at its expected high unless given)."""
    marks: dict[str, dict[str, int]] = {}
    for u in units:
        marks.setdefault(u.dataset_urn, {})[u.partition] = (highs or {}).get(u.partition, u.expected_high_watermark)
    return marks


def extract(source: Source, unit: WorkUnitSpec) -> tuple[list[dict[str, Any]], list[int], int]:
    """Every record of a work unit, the watermark after each, and the watermark at the end."""
    extractor = source.get_extractor(WorkUnitState(unit, source.config, "run-1", "task-00000", 1))
    records, marks = [], []
    try:
        extractor.get_schema()
        while (record := extractor.read_record()) is not None:
            records.append(record)
            marks.append(extractor.next_watermark)
    finally:
        extractor.close()
    return records, marks, extractor.next_watermark


def published(publish_dir: Path) -> list[dict[str, Any]]:
    """Every record of every published Avro file."""
    records: list[dict[str, Any]] = []
    for path in sorted(publish_dir.rglob("*.avro")):
        with path.open("rb") as stream:
            records += [r for r in fastavro.reader(stream) if isinstance(r, dict)]
    return records


def write_job(tmp_path: Path, name: str, keys: dict[str, str]) -> Path:
    """A YAML job file writing under tmp_path, logging to a SQLite file there."""
    job = {"job.name": name, "writer.staging.dir": str(tmp_path / "staging"),
           "writer.output.dir": str(tmp_path / "task-output"), "data.publisher.final.dir": str(tmp_path / "publish"),
           "oncelog.log.url": f"sqlite:///{tmp_path / 'events.db'}", "spark.master": "local[2]",
           "task.retry.intervalinsec": "0", "task.maxretries": "1", **keys}
    path = tmp_path / f"{name}.yaml"
    path.write_text("".join(f"{json.dumps(k)}: {json.dumps(v)}\n" for k, v in job.items()))
    return path


def run_job(path: Path, spark: SparkSession) -> None:
    result = JobLauncher(load_job_config(path), spark=spark).run()
    assert result.status is RunStatus.COMMITTED, result.error


def verified(tmp_path: Path) -> State:
    """Check every invariant of the job's log and return its state."""
    with open_log(f"sqlite:///{tmp_path / 'events.db'}") as log:
        report = verify(log, tmp_path / "publish")
        assert report.ok, report.violations
        state = State()
        for logged in log.read():
            state.apply(logged)
    return state


# --- Kafka ---------------------------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, partition: int, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value.encode(), key=value.encode(), partition=partition)
    assert producer.flush(30) == 0


def transactional(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    return producer


def transaction(bootstrap: str, topic: str, partition: int, values: list[str], commit: bool) -> None:
    """Produce values in one transaction, committed or aborted (each leaves a control record)."""
    producer = transactional(bootstrap)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value.encode(), partition=partition)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)
        producer.abort_transaction(30)


def values_of(records: list[dict[str, Any]]) -> list[str]:
    return [r["value"].decode() for r in records]


@pytest.mark.kafka
def test_kafka_work_units_read_exactly_the_committed_records(kafka_bootstrap: str) -> None:
    topic = create_topic(kafka_bootstrap, 3, "sources")
    produce(kafka_bootstrap, topic, 0, [f"p0-{i}" for i in range(5)])  # offsets 0-4
    transaction(kafka_bootstrap, topic, 1, ["c0", "c1", "c2", "c3"], commit=True)  # 0-3, marker 4
    transaction(kafka_bootstrap, topic, 1, ["a0", "a1", "a2"], commit=False)  # 5-7 aborted, marker 8
    produce(kafka_bootstrap, topic, 2, ["p2-0", "p2-1"])  # 0-1
    transaction(kafka_bootstrap, topic, 2, ["t0", "t1", "t2"], commit=True)  # 2-4, marker 5

    config = config_of(KAFKA_SOURCE, **{"kafka.brokers": kafka_bootstrap, "topic.whitelist": topic})
    source = KafkaTopicSource(config)
    units = source.get_work_units(source_state(config))
    assert {u.dataset_urn: (u.partition, u.low_watermark, u.expected_high_watermark, u.estimated_records)
            for u in units} == {f"{topic}.0": (f"{topic}:0", 0, 5, 5), f"{topic}.1": (f"{topic}:1", 0, 9, 9),
                                f"{topic}.2": (f"{topic}:2", 0, 6, 6)}
    expected = {0: [f"p0-{i}" for i in range(5)], 1: ["c0", "c1", "c2", "c3"], 2: ["p2-0", "p2-1", "t0", "t1", "t2"]}
    for unit in units:
        records, marks, end = extract(source, unit)
        partition = int(unit.properties["kafka.partition"])
        assert values_of(records) == expected[partition]
        assert [r["offset"] for r in records] == list(range(len(records)))
        assert all(r["topic"] == topic and r["partition"] == partition and r["timestamp"] for r in records)
        assert marks[-1] == end == unit.expected_high_watermark, "past the trailing commit / abort marker"

    assert source.get_work_units(source_state(config, committed(units))) == [], "caught up: nothing to plan"

    produce(kafka_bootstrap, topic, 0, ["p0-5", "p0-6"])
    open_tx = transactional(kafka_bootstrap)  # an open transaction stays past the last stable offset
    open_tx.begin_transaction()
    open_tx.produce(topic, value=b"open", partition=2)
    open_tx.flush(30)
    (again,) = source.get_work_units(source_state(config, committed(units)))
    assert (again.partition, again.low_watermark, again.expected_high_watermark) == (f"{topic}:0", 5, 7)
    records, _, end = extract(source, again)
    assert values_of(records) == ["p0-5", "p0-6"] and end == 7
    open_tx.abort_transaction(30)


@pytest.mark.kafka
def test_kafka_bootstrap_caps_and_errors(kafka_bootstrap: str) -> None:
    topic = create_topic(kafka_bootstrap, 2, "sources")
    produce(kafka_bootstrap, topic, 0, [f"v{i}" for i in range(6)])
    keys = {"kafka.brokers": kafka_bootstrap, "topic.whitelist": topic}

    latest = KafkaTopicSource(config_of(KAFKA_SOURCE, **keys, **{"bootstrap.with.offset": "LATEST"}))
    plan = latest.get_work_units(source_state(latest.config))
    assert sorted((u.partition, u.low_watermark, u.expected_high_watermark) for u in plan) == [
        (f"{topic}:0", 6, 6), (f"{topic}:1", 0, 0)], "new partitions get an empty unit pinning where they start"
    records, _, end = extract(latest, plan[0])
    assert (records, end) == ([], 6)

    capped = KafkaTopicSource(config_of(KAFKA_SOURCE, **keys, **{"kafka.max.records.per.partition": "4"}))
    (unit, _) = sorted(capped.get_work_units(source_state(capped.config)), key=lambda u: u.partition)
    assert (unit.low_watermark, unit.expected_high_watermark) == (0, 4)
    assert values_of(extract(capped, unit)[0]) == ["v0", "v1", "v2", "v3"]

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # retention, simulated: offsets 0-2 deleted
    for future in admin.delete_records([TopicPartition(topic, 0, 3)], request_timeout=30).values():
        future.result(timeout=30)
    lost = [u for u in capped.get_work_units(source_state(capped.config, {f"{topic}.0": {f"{topic}:0": 1}}))
            if u.partition == f"{topic}:0"]
    assert [(u.low_watermark, u.properties[LOST]) for u in lost] == [(3, "1-3")]

    missing = KafkaTopicSource(config_of(KAFKA_SOURCE, **{**keys, "topic.whitelist": f"{topic},no-such-topic"}))
    with pytest.raises(SourceError, match="no-such-topic"):
        missing.get_work_units(source_state(missing.config))
    gone = unit.model_copy(update={"properties": {"kafka.topic": topic, "kafka.partition": "7"}})
    with pytest.raises(SourceError, match=rf"{topic}\[7\] does not exist"):
        extract(capped, gone)


def test_the_kafka_sources_clients_take_the_logs_client_defaults() -> None:
    """librdkafka's default reconnect.backoff.ms held each new client's first answer ~45 ms (half of every plan)."""
    source = KafkaTopicSource(config_of(KAFKA_SOURCE, **{"kafka.brokers": "127.0.0.1:9", "topic.whitelist": "t"}))
    cluster = SourceCluster(source.settings(), source.config.log_url, source.config.log_settings)
    assert CLIENT_DEFAULTS.items() <= cluster.config().items()
    assert cluster.config(**{"reconnect.backoff.ms": 7})["reconnect.backoff.ms"] == 7

@pytest.mark.kafka
def test_kafka_range_without_records_advances_through_the_task_flow(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = create_topic(kafka_bootstrap, 1, "sources")
    transaction(kafka_bootstrap, topic, 0, ["a0", "a1"], commit=False)  # 0-1 aborted, marker 2
    config = config_of(KAFKA_SOURCE, **{
        "kafka.brokers": kafka_bootstrap, "topic.whitelist": topic, "writer.staging.dir": str(tmp_path / "s"),
        "writer.output.dir": str(tmp_path / "o"), "data.publisher.final.dir": str(tmp_path / "p")})
    (unit,) = KafkaTopicSource(config).get_work_units(source_state(config))
    (result,) = run_attempt(build_constructs(config), "run-1", MultiWorkUnit("task-00000", (unit,)), 1, last=True)
    assert result.records_extracted == 0
    assert result.actual_high_watermark == 3


@pytest.mark.kafka
@pytest.mark.spark
def test_kafka_job_publishes_every_record_exactly_once(kafka_bootstrap: str, spark: SparkSession,
                                                       tmp_path: Path) -> None:
    topic = create_topic(kafka_bootstrap, 3, "sources")
    produce(kafka_bootstrap, topic, 0, ["r1-p0-a", "r1-p0-b"])
    transaction(kafka_bootstrap, topic, 1, ["r1-p1-a", "r1-p1-b"], commit=True)
    transaction(kafka_bootstrap, topic, 1, ["aborted-1"], commit=False)
    produce(kafka_bootstrap, topic, 1, ["r1-p1-c"])
    transaction(kafka_bootstrap, topic, 2, ["r1-p2-a"], commit=True)
    job = write_job(tmp_path, "kafka-job", {"source.class": KAFKA_SOURCE, "kafka.brokers": kafka_bootstrap,
                                             "topic.whitelist": topic, "kafka.fetch.batch.size": "2"})
    run_job(job, spark)
    transaction(kafka_bootstrap, topic, 0, ["r2-p0-a", "r2-p0-b"], commit=True)
    transaction(kafka_bootstrap, topic, 2, ["aborted-2"], commit=False)
    produce(kafka_bootstrap, topic, 2, ["r2-p2-a"])
    run_job(job, spark)

    records = published(tmp_path / "publish")
    coordinates = Counter((r["topic"], r["partition"], r["offset"]) for r in records)
    assert max(coordinates.values()) == 1, "no record published twice"
    assert sorted(values_of(records)) == sorted(["r1-p0-a", "r1-p0-b", "r1-p1-a", "r1-p1-b", "r1-p1-c", "r1-p2-a",
                                                 "r2-p0-a", "r2-p0-b", "r2-p2-a"])
    datasets = verified(tmp_path).dataset_states("kafka-job")
    assert {urn: view.watermarks for urn, view in datasets.items()} == {
        f"{topic}.0": {f"{topic}:0": 5}, f"{topic}.1": {f"{topic}:1": 6}, f"{topic}.2": {f"{topic}:2": 5}}


# --- directory -----------------------------------------------------------------------------------------------------


def write(path: Path, text: str, mtime_s: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime_s is not None:
        os.utime(path, (mtime_s, mtime_s))
    return path


def write_avro(path: Path, rows: list[dict[str, Any]], schema: dict[str, Any], block: int = 1_000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as stream:
        fastavro.writer(stream, fastavro.parse_schema(schema), rows, sync_interval=block)
    return path


def test_directory_plans_new_files_oldest_first_and_reads_lines(tmp_path: Path) -> None:
    data = tmp_path / "in"
    write(data / "b.txt", "b1\nb2\r\nb3", mtime_s=1_000)  # no final newline
    write(data / "a.txt", "a1\n", mtime_s=2_000)
    write(data / "sub" / "c.txt", "c1\n", mtime_s=500)
    write(data / ".hidden.txt", "x\n")
    write(data / "_SUCCESS", "")
    write(data / "empty.txt", "")
    write(data / "skip.csv", "x\n")
    keys = {"source.filebased.data.directory": str(data), "source.filebased.files.pattern": "*.txt",
            "dataset.urn": "files"}
    source = DirectorySource(config_of(DIRECTORY_SOURCE, **keys))
    units = source.get_work_units(source_state(source.config))
    assert [(u.dataset_urn, u.partition, u.low_watermark) for u in units] == [("files", "b.txt", 0),
                                                                                ("files", "a.txt", 0)]
    records, marks, end = extract(source, units[0])
    assert records == [{"file": "b.txt", "line_number": n, "text": f"b{n}"} for n in (1, 2, 3)]
    assert marks == [position(3), position(7), complete(9)] and end == units[0].expected_high_watermark

    recursive = DirectorySource(config_of(DIRECTORY_SOURCE, **keys, **{"source.filebased.recursive": "true",
                                                                        "source.filebased.max.files.per.run": "2"}))
    assert [(u.dataset_urn, u.partition) for u in recursive.get_work_units(source_state(recursive.config))] == [
        ("files/sub", "sub/c.txt"), ("files", "b.txt")]
    missing = DirectorySource(config_of(DIRECTORY_SOURCE, **{"source.filebased.data.directory": str(tmp_path / "no")}))
    with pytest.raises(SourceError, match="source.filebased.data.directory"):
        missing.get_work_units(source_state(missing.config))


def test_directory_resumes_partly_read_files_and_warns_on_modified_ones(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "in"
    write(data / "done.txt", "1\n2\n")
    write(data / "grown.txt", "1\n")
    write(data / "partial.txt", "1\n2\n3\n")
    source = DirectorySource(config_of(DIRECTORY_SOURCE, **{"source.filebased.data.directory": str(data)}))
    state = source_state(source.config, {"sources-test": {"done.txt": complete(4), "grown.txt": complete(1),
                                                          "partial.txt": position(4)}})
    with caplog.at_level(logging.WARNING):
        (unit,) = source.get_work_units(state)
    assert "grown.txt was modified after it was ingested" in caplog.text and "done.txt" not in caplog.text
    assert (unit.partition, unit.low_watermark) == ("partial.txt", position(4))
    records, _, end = extract(source, unit)
    assert records == [{"file": "partial.txt", "line_number": 3, "text": "3"}] and end == complete(6)


def test_directory_json_and_avro_formats(tmp_path: Path) -> None:
    data = tmp_path / "in"
    path = write(data / "a.jsonl", '{"n": 1}\n\n{"n": 2}\n\n\n')
    json_source = DirectorySource(config_of(DIRECTORY_SOURCE, **{
        "source.filebased.data.directory": str(data), "source.filebased.format": "json",
        "source.filebased.json.schema": '{"type": "record", "name": "N", "fields": [{"name": "n", "type": "long"}]}'}))
    (unit,) = json_source.get_work_units(source_state(json_source.config))
    records, marks, _ = extract(json_source, unit)
    assert records == [{"n": 1}, {"n": 2}]
    assert marks[-1] == complete(path.stat().st_size), "the trailing blank lines are read with the last record"

    schema = {"type": "record", "name": "R", "fields": [{"name": "i", "type": "long"}]}
    avro_dir = tmp_path / "avro"
    path = write_avro(avro_dir / "a.avro", [{"i": i} for i in range(3_000)], schema)
    write_avro(avro_dir / "header-only.avro", [], schema)
    avro = DirectorySource(config_of(DIRECTORY_SOURCE, **{"source.filebased.data.directory": str(avro_dir),
                                                          "source.filebased.format": "avro"}))
    (unit,) = avro.get_work_units(source_state(avro.config))
    records, marks, end = extract(avro, unit)
    assert [r["i"] for r in records] == list(range(3_000)) and end == complete(path.stat().st_size)
    inside = next(i for i in range(1_000, 3_000) if 0 < marks[i] % SCALE < COMPLETE)  # mid-block: offset + records
    resumed = unit.model_copy(update={"low_watermark": marks[inside]})
    assert [r["i"] for r in extract(avro, resumed)[0]] == list(range(inside + 1, 3_000))


@pytest.mark.spark
def test_directory_job_publishes_every_line_exactly_once(spark: SparkSession, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "in"
    for name in ("a", "b", "c"):
        write(data / f"{name}.log", "".join(f"{name}-{i}\n" for i in range(50)))
    write(data / "day=1" / "d.log", "d-0\nd-1\n")
    job = write_job(tmp_path, "dir-job", {"source.class": DIRECTORY_SOURCE, "source.filebased.data.directory":
                                          str(data), "source.filebased.recursive": "true"})
    run_job(job, spark)
    write(data / "e.log", "e-0\n")
    write(data / "day=2" / "f.log", "f-0\nf-1\nf-2\n")
    write(data / "a.log", "rewritten\n")  # modified after ingestion: warned about, not re-ingested
    with caplog.at_level(logging.WARNING):
        run_job(job, spark)
    assert "a.log was modified after it was ingested" in caplog.text

    texts = Counter(r["text"] for r in published(tmp_path / "publish"))
    expected = [f"{n}-{i}" for n in "abc" for i in range(50)] + ["d-0", "d-1", "e-0", "f-0", "f-1", "f-2"]
    assert texts == Counter(expected)
    datasets = verified(tmp_path).dataset_states("dir-job")
    assert sorted(datasets) == ["dir-job", "dir-job/day=1", "dir-job/day=2"]
    assert sorted(datasets["dir-job"].watermarks) == ["a.log", "b.log", "c.log", "e.log"]
