"""Partition completeness end to end, on a real Kafka topic and Spark: two runs of an hourly-partitioned job, the
first capped (not caught up), the second caught up with a late record in an hour the first completed. Each hour of
each dataset is completed exactly once, with its `_SUCCESS` marker; the late record is published (once) and counted;
`oncelog state` shows the horizon and the late records; verify passes."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import fastavro
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from events.completeness import PartitionCompleted
from events.log import open_log
from oncelog.cli import app
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.kafka_plugin import create_topic

DAY = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
MINUTE = 60_000


def produce(bootstrap: str, topic: str, minutes: list[int]) -> None:
    """One record per minute given, in each of the topic's two partitions, with that Kafka timestamp."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for minute in minutes:
        for partition in (0, 1):
            producer.produce(topic, value=f"m{minute}".encode(), partition=partition,
                             timestamp=DAY + minute * MINUTE)
    assert producer.flush(30) == 0


def test_hours_complete_once_across_two_runs_and_late_data_is_published_and_counted(
        kafka_bootstrap: str, spark: SparkSession, tmp_path: Path) -> None:
    topic = create_topic(kafka_bootstrap, 2, "complete")
    produce(kafka_bootstrap, topic, [i * 4 for i in range(60)])  # hours 00 to 03
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = tmp_path / "clicks.yaml"
    job.write_text("".join(f"{json.dumps(k)}: {json.dumps(v)}\n" for k, v in {
        "job.name": "clicks", "source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
        "kafka.brokers": kafka_bootstrap, "topic.whitelist": topic, "kafka.max.records.per.partition": "40",
        "writer.staging.dir": str(tmp_path / "staging"), "writer.output.dir": str(tmp_path / "task-output"),
        "data.publisher.final.dir": str(tmp_path / "published"), "oncelog.log.url": url,
        "writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner",
        "writer.partition.timezone": "UTC", "writer.partition.allowed.lateness": "15m",
        "writer.partition.success.file": "true", "spark.master": "local[2]"}.items()))
    config = load_job_config(job)

    first = JobLauncher(config, spark=spark).run()  # offsets 0-39: minutes 0 to 156, hour 02 begun
    assert first.status is RunStatus.COMMITTED, first.error
    markers = sorted(p.relative_to(tmp_path / "published").as_posix()
                     for p in (tmp_path / "published").rglob("_SUCCESS"))
    assert markers == [f"{topic}.{p}/2026/01/01/00/_SUCCESS" for p in (0, 1)]  # 01 ends at 02:00 + 15 min: open

    produce(kafka_bootstrap, topic, [10])  # late: hour 00 is complete
    second = JobLauncher(config, spark=spark).run()  # caught up: every hour up to its planning - 15 min complete
    assert second.status is RunStatus.COMMITTED, second.error

    with open_log(url) as log:
        completed = [e.event for e in log.read() if isinstance(e.event, PartitionCompleted)]
        report = verify(log, tmp_path / "published")
    assert report.ok, report.violations
    per_partition = Counter((e.dataset_urn, e.partition) for e in completed)
    hours = [f"2026/01/01/{h:02d}" for h in range(4)]
    assert per_partition == {(f"{topic}.{p}", hour): 1 for p in (0, 1) for hour in hours}
    assert {e.run_id for e in completed if e.partition == hours[0]} == {first.run_id}
    assert {e.run_id for e in completed if e.partition != hours[0]} == {second.run_id}
    assert sorted(p.relative_to(tmp_path / "published").as_posix()
                  for p in (tmp_path / "published").rglob("_SUCCESS")) == [
        f"{topic}.{p}/{hour}/_SUCCESS" for p in (0, 1) for hour in hours]
    published: Counter[tuple[int, int]] = Counter()
    for path in (tmp_path / "published").rglob("*.avro"):
        with path.open("rb") as stream:
            published.update((r["partition"], r["offset"]) for r in fastavro.reader(stream) if isinstance(r, dict))
    assert published == {(p, o): 1 for p in (0, 1) for o in range(61)}  # the late record too, once

    shown = CliRunner().invoke(app, ["state", "--log", url])
    assert shown.exit_code == 0, shown.output
    assert "Time partitions (complete up to the horizon)" in shown.output
    for p in (0, 1):
        line = next(line for line in shown.output.splitlines() if line.startswith(f"clicks  {topic}.{p} ")
                    and "2026/01/01/00=1" in line)
        assert " 4 " in line, line  # four hours completed, the late record of hour 00 counted
    document = json.loads(CliRunner().invoke(app, ["state", "--log", url, "--json"]).output)
    horizons = {d["dataset_urn"]: d["completeness"]["horizon_ms"] for d in document["datasets"]}
    assert all(h >= DAY + 4 * 60 * MINUTE for h in horizons.values()), horizons
