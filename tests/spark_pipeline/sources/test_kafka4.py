"""One end-to-end job on Apache Kafka 4.x: the record engine reads a Kafka topic and logs its events, both on Kafka 4.

The contract suite (tests/contract/test_log_contract.py) runs the Kafka store on both 3.9.1 and 4.x; this adds the
Kafka topic source and the whole publish protocol on the 4.x broker.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.log import open_log
from replay.verify import verify
from tests.kafka_plugin import create_topic
from tests.spark_pipeline.sources.test_sources import (
    KAFKA_SOURCE,
    produce,
    published,
    run_job,
    transaction,
    values_of,
    write_job,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_a_kafka_job_on_kafka4_publishes_every_committed_record_once(kafka4_bootstrap: str, spark: SparkSession,
                                                                     tmp_path: Path) -> None:
    """Two runs over a Kafka 4 topic (plain, committed and aborted transactional records), events on Kafka 4 too:
    every committed record published once, aborted ones never, and the log's invariants hold."""
    topic = create_topic(kafka4_bootstrap, 2, "kafka4")
    log_url = f"kafka://{kafka4_bootstrap}?topic=oncelog.kafka4.{uuid.uuid4().hex[:8]}&partitions=2&write_timeout_s=60"
    produce(kafka4_bootstrap, topic, 0, ["r1-p0-a", "r1-p0-b"])
    transaction(kafka4_bootstrap, topic, 1, ["r1-p1-a"], commit=True)
    transaction(kafka4_bootstrap, topic, 1, ["aborted-1"], commit=False)
    job = write_job(tmp_path, "kafka4-job", {"source.class": KAFKA_SOURCE, "kafka.brokers": kafka4_bootstrap,
                                              "topic.whitelist": topic, "oncelog.log.url": log_url})
    run_job(job, spark)
    transaction(kafka4_bootstrap, topic, 0, ["r2-p0-a"], commit=True)
    produce(kafka4_bootstrap, topic, 1, ["r2-p1-a"])
    run_job(job, spark)

    records = published(tmp_path / "publish")
    assert max(Counter((r["partition"], r["offset"]) for r in records).values()) == 1, "a record published twice"
    assert sorted(values_of(records)) == sorted(["r1-p0-a", "r1-p0-b", "r1-p1-a", "r2-p0-a", "r2-p1-a"])
    with open_log(log_url) as log:
        report = verify(log, tmp_path / "publish")
    assert report.ok, report.violations
