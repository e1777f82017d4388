"""Gobblin's MyTopic job (Kafka → Avro on HDFS) on a real Spark standalone cluster, one worker SIGKILLed (with its
executor) under its task.

The job (`oncelog run`, a driver process of its own against the cluster's master) reads a two-partition Kafka topic
through a slow converter, so each task runs for seconds on its own worker (1 core each). As soon as worker 0's task
has started and been running for a moment, worker 0 is killed as a lost machine: the Worker JVM, its executor JVM
and the executor's Python workers. That run must fail cleanly (or complete: Spark may run the lost task elsewhere)
without publishing anything twice; after worker 0 is restarted, the next run publishes every record of MyTopic
exactly once (with a few records produced since), and `oncelog verify --publish-dir` passes.

What Spark does (4.x): a task lost with its executor because the worker died is not counted against
`spark.task.maxFailures` (the worker's loss is not the task's fault), so Spark runs it again on the other executor
and the run commits; oncelog must record that second Spark attempt under attempt numbers of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from events.job import JobRunCommitted, JobRunFailed
from events.log import Subscription, open_log
from events.model import Event
from events.task import TaskEvent, TaskStarted
from filesystems import urls
from filesystems.router import FileSystems
from localservers.hdfs import LocalHdfs
from localservers.spark import LocalSparkCluster
from projections.projector import Projector
from spark_pipeline.constructs import Converter, Record, Schema, WorkUnitState
from spark_pipeline.jobfile.paths import RUN_ID
from tests.fault.soak import (
    JOB,
    JVM_OPTIONS,
    PARTITIONS,
    REPO,
    Source,
    check_no_duplicates,
    check_none_missing,
    create_topic,
    full_run,
    kill_session,
    new_events,
    start_run,
    tail,
    watching,
)
from tests.remote_fs_plugin import hdfs_settings

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

RECORDS_PER_PARTITION = 30
MORE_RECORDS_PER_PARTITION = 5
"""Produced after the killed run: the rerun has tasks to run, on the restarted worker too."""
RECORD_DELAY_S = 0.1
"""Per record, in the converter: a task lasts RECORDS_PER_PARTITION × this, seconds for the kill to land in."""
KILL_AFTER_S = 1.0
"""How long worker 0's task runs (after its TaskStarted is in the log) before the worker is killed."""
RUN_TIMEOUT_S = 180.0
KILLED = 0


class SlowConverter(Converter):
    """Passes each record through after RECORD_DELAY_S: the tasks run long enough to be killed in the middle."""

    def convert_schema(self, input_schema: Schema, state: WorkUnitState) -> Schema:
        return input_schema

    def convert_record(self, output_schema: Schema, record: Record, state: WorkUnitState) -> Iterable[Record]:
        time.sleep(RECORD_DELAY_S)
        yield record


def write_cluster_job(base: Path, root: str, bootstrap: str, topic: str, log_url: str, master_url: str,
                      **settings: str) -> Path:
    """The MyTopic job file for the cluster at `master_url`, writing and publishing under `root` (a path or a URL;
    `settings` are the keys that reach its store)."""
    job = {
        "job.name": JOB, "source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
        "kafka.brokers": bootstrap, "topic.whitelist": topic,
        "converter.classes": f"{SlowConverter.__module__}.{SlowConverter.__qualname__}",
        "task.engine": "records",  # the record engine's tasks on the executors: what the worker kill hits
        "writer.staging.dir": urls.join(root, "staging"), "writer.output.dir": urls.join(root, "task-output"),
        "data.publisher.final.dir": urls.join(root, "published"), "job.commit.policy": "full", **settings,
        "task.maxretries": 1, "task.retry.intervalinsec": 0, "oncelog.log.url": log_url,
        "spark.master": master_url, "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.extraJavaOptions": JVM_OPTIONS, "spark.executor.extraJavaOptions": JVM_OPTIONS,
        "spark.executor.memory": "512m",  # all a worker offers, and Spark's minimum (450m)
        # Schedule only once both executors registered: one task per worker, so a kill hits exactly one task.
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
    }
    path = base / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def produce(source: Source, per_partition: int) -> None:
    """Produce `per_partition` new records (values `p<partition>-<n>`) to each partition of the topic."""
    producer = Producer({"bootstrap.servers": source.bootstrap, "enable.idempotence": True, "acks": "all"})
    for partition, ids in source.produced.items():
        new = [f"p{partition}-{n}" for n in range(len(ids), len(ids) + per_partition)]
        for value in new:
            producer.produce(source.topic, value=value.encode(), partition=partition)
        ids.extend(new)
    assert producer.flush(60) == 0, f"records to {source.topic} were not acknowledged within 60s"


@dataclass
class KilledRun:
    """A run during which worker 0 was killed: how it exited, its JSON summary, what the kill hit."""

    returncode: int
    summary: dict[str, object]
    stderr: Path
    killed_pids: set[int] = field(default_factory=set)
    killed_task: str = ""
    run_id: str = ""
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    killed_at: datetime | None = None

    def timeline(self) -> str:
        """The run's events (and the kill) in seconds since its start: what the test prints."""
        marks = [((e.emitted_at - self.started).total_seconds(), type(e).__name__ + (
            f" {e.task_id}#{e.attempt} on {getattr(e, 'executor', '')}" if isinstance(e, TaskEvent) else ""))
                 for e in self.events]
        if self.killed_at is not None:
            marks.append(((self.killed_at - self.started).total_seconds(), f"SIGKILL worker {KILLED}"))
        return "\n".join(f"{t:7.2f}s {what}" for t, what in sorted(marks))
    events: list[Event] = field(default_factory=list)


def executor_pid(event: TaskStarted) -> int:
    """The pid of the Python worker that runs the task (TaskStarted.executor is `host:pid`)."""
    return int(event.executor.rsplit(":", 1)[1])


def run_killing_worker(cluster: LocalSparkCluster, job: Path, out_dir: Path, watch: Subscription) -> KilledRun:
    """Start a run; KILL_AFTER_S after a task started on worker 0, kill that worker; return once the run ended."""
    since = datetime.now(UTC)
    proc, stdout, stderr = start_run(job, out_dir, "killed")
    run = KilledRun(-1, {}, stderr, started=since)
    kill_at: float | None = None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"the run did not end within {RUN_TIMEOUT_S:.0f}s:\n{tail(stderr)}"
            for event in new_events(watch, since):
                run.events.append(event)
                if (kill_at is None and isinstance(event, TaskStarted)
                        and executor_pid(event) in cluster.worker_processes(KILLED)):
                    kill_at = time.monotonic() + KILL_AFTER_S
                    run.killed_task, run.run_id = event.task_id, event.run_id
            if kill_at is not None and not run.killed_pids and time.monotonic() >= kill_at:
                run.killed_pids = cluster.kill_worker(KILLED)
                run.killed_at = datetime.now(UTC)
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            kill_session(proc)
    run.events += list(new_events(watch, since))
    run.returncode = proc.returncode
    try:
        run.summary = json.loads(stdout.read_text() or "{}")
    except json.JSONDecodeError:
        run.summary = {}
    return run


def check_published_exactly_once(log_url: str, root: str, source: Source) -> None:
    """Every produced record published once, watermarks at the ends, nothing pending or left, verify passes."""
    publish_dir = urls.join(root, "published")
    check_none_missing(check_no_duplicates(publish_dir, source, "the rerun"), source, "the rerun")
    with open_log(log_url) as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
    assert state.pending_sequences(JOB) == [], "a commit sequence is left pending"
    for partition, ids in source.produced.items():
        view = state.datasets[(JOB, f"{source.topic}.{partition}")]
        assert view.watermarks[f"{source.topic}:{partition}"] == len(ids)
    for folder in ("staging", "task-output"):
        left = [name for name in FileSystems.of({}).list_folders(urls.join(root, folder)) if RUN_ID.match(name)]
        assert not left, f"{folder} still holds run folders {left}"
    verified = subprocess.run([sys.executable, "-m", "oncelog", "verify", "--log", log_url, "--publish-dir",
                               str(publish_dir)], cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                              check=False)
    assert verified.returncode == 0, f"oncelog verify exited {verified.returncode}:\n{verified.stdout[-4000:]}"


def run_events(events: list[Event], run_id: str) -> list[Event]:
    return [e for e in events if getattr(e, "run_id", None) == run_id]


def test_a_worker_killed_under_its_task_then_a_rerun_publishes_mytopic_to_hdfs_exactly_once(
        spark_cluster: LocalSparkCluster, kafka_bootstrap: str, hdfs: LocalHdfs, hdfs_folder: str,
        tmp_path: Path) -> None:
    topic = f"MyTopic.{uuid.uuid4().hex[:12]}"
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    source = Source(kafka_bootstrap, topic, {p: [] for p in range(PARTITIONS)})
    produce(source, RECORDS_PER_PARTITION)
    # A killed writer's open transaction holds the log's stable end until it times out: 30s, not the default 120s.
    url = f"kafka://{kafka_bootstrap}?topic=oncelog.cluster.{uuid.uuid4().hex[:12]}&write_timeout_s=30"
    publish_dir = urls.join(hdfs_folder, "published")
    job = write_cluster_job(tmp_path, hdfs_folder, kafka_bootstrap, topic, url, spark_cluster.master_url,
                            **hdfs_settings(hdfs))
    (tmp_path / "runs").mkdir()

    phases = [time.monotonic()]
    with watching(url) as watch:
        try:
            killed = run_killing_worker(spark_cluster, job, tmp_path / "runs", watch)
        finally:
            phases.append(time.monotonic())
            if spark_cluster.workers[KILLED] is None:
                spark_cluster.restart_worker(KILLED)
            phases.append(time.monotonic())
    print(f"run with worker {KILLED} killed (exit {killed.returncode}):\n{killed.timeline()}")
    assert killed.killed_pids, f"no task ran on worker {KILLED}, nothing was killed:\n{tail(killed.stderr)}"
    mine = run_events(killed.events, killed.run_id)
    if killed.returncode == 0:  # Spark ran the lost task again elsewhere
        assert killed.summary["status"] == "COMMITTED" and any(isinstance(e, JobRunCommitted) for e in mine)
    else:
        assert killed.summary.get("status") == "FAILED", f"{killed.summary}\n{tail(killed.stderr)}"
        error = str(killed.summary.get("error"))
        assert killed.killed_task in error or "lost" in error.lower(), error
        failed = [i for i, e in enumerate(mine) if isinstance(e, JobRunFailed)]
        assert len(failed) == 1, f"the failed run recorded {len(failed)} JobRunFailed"
        late = [type(e).__name__ for e in mine[failed[0]:] if isinstance(e, TaskEvent)]
        assert not late, f"task events after the run's JobRunFailed: {late}"
    check_no_duplicates(publish_dir, source, "the run with the killed worker")

    produce(source, MORE_RECORDS_PER_PARTITION)
    rerun = full_run(job, tmp_path / "runs", "rerun")
    phases.append(time.monotonic())
    assert rerun.returncode == 0, rerun.describe()
    check_published_exactly_once(url, hdfs_folder, source)
    phases.append(time.monotonic())
    print("seconds: " + ", ".join(f"{name} {b - a:.1f}" for name, a, b in zip(
        ("killed run", "worker restart", "rerun", "checks"), phases, phases[1:])))
