"""The seed's example for real: Gobblin's MyTopic job (a two-partition Kafka topic → Avro) writing and publishing to
HDFS and to S3, run twice with the driver killed in the middle of the first run's commit (after its first publish
move), then recovered by the next run: every record of MyTopic published exactly once, `verify --publish-dir` on
the remote folder passes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from filesystems import urls
from spark_pipeline.commit.faults import CRASH_EXIT_CODE
from tests.fault.pipeline_checks import run_cli
from tests.fault.soak import (
    JOB,
    PARTITIONS,
    REPO,
    Source,
    check_no_duplicates,
    check_none_missing,
    create_topic,
)
from tests.fault.test_standalone_cluster import produce
from tests.remote_fs_plugin import Remote

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

RECORDS_PER_PARTITION = 40


def write_mytopic_job(base: Path, remote: Remote, bootstrap: str, topic: str, log_url: str) -> Path:
    """Gobblin's MyTopic job (exactly-once-support.md's example), its folders on the remote store."""
    job = {
        "job.name": JOB, "source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
        "kafka.brokers": bootstrap, "topic.whitelist": topic,
        "writer.staging.dir": urls.join(remote.root, "task-staging"),
        "writer.output.dir": urls.join(remote.root, "task-output"),
        "data.publisher.final.dir": urls.join(remote.root, "job-output"),
        "job.commit.policy": "full", "oncelog.log.url": log_url,
        "commit.parallelism": 1,  # the crash after the first publish lands with one partition's dataset left to do
        "spark.master": "local[2]", "spark.ui.enabled": "false", **remote.settings,
    }
    path = base / "MyTopic.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_mytopic_to_a_remote_store_crashed_in_its_commit_is_published_exactly_once(
        remote: Remote, kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"MyTopic.{uuid.uuid4().hex[:12]}"
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    source = Source(kafka_bootstrap, topic, {p: [] for p in range(PARTITIONS)})
    produce(source, RECORDS_PER_PARTITION)
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_mytopic_job(tmp_path, remote, kafka_bootstrap, topic, log_url)
    published = urls.join(remote.root, "job-output")

    crashed = run_cli(job, crash_at="after-rename")
    assert crashed.returncode == CRASH_EXIT_CODE, f"exit {crashed.returncode}\n{crashed.stderr[-3000:]}"
    seen = check_no_duplicates(published, source, "the crash")
    assert sum(seen.values()) == RECORDS_PER_PARTITION, "the crash should leave one partition's file published"

    produce(source, 5)
    again = run_cli(job)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    check_none_missing(check_no_duplicates(published, source, "the rerun"), source, "the rerun")
    verified = subprocess.run([sys.executable, "-m", "oncelog", "verify", "--log", log_url, "--publish-dir", published],
                              cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-2000:]
