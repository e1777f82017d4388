"""Tasks on Spark: one Spark task per MultiWorkUnit, run on the executors, each recording its attempts in the log."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from py4j.protocol import Py4JError
from pyspark import Accumulator, AccumulatorParam, SparkConf, SparkContext, TaskContext
from pyspark.sql import SparkSession

from events.errors import ConfigError, OncelogError
from events.log import open_log
from filesystems.router import FileSystems
from spark_pipeline.commit.engine import CommitEngine, job_publisher
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.shards import (
    ShardLostError,
    ShardSummary,
    ShardWork,
    commit_shard,
)
from spark_pipeline.connectors import with_connectors
from spark_pipeline.constructs import MultiWorkUnit
from spark_pipeline.engines.attempts import TaskOutcome
from spark_pipeline.engines.failures import full_text, root_cause
from spark_pipeline.engines.isolation import most_attempts
from spark_pipeline.engines.records.task import run_task
from spark_pipeline.jobfile.config import SPECULATION, JobConfig

PROGRESS_POLL_S = 0.25
JOB_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
"""The thread-local properties `setJobGroup` sets (restored on the caller's thread after the run's tasks)."""
TaskProgress = Callable[[int, int], None]
"""Told the tasks finished so far and the records they wrote (from a polling thread)."""

SPARK_DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    "spark.task.maxFailures": "1",  # retries are task.maxretries', recorded in the log; Spark's would be silent
    "spark.sql.shuffle.partitions": "8",
    SPECULATION: "false",  # a speculative copy of a task would open the task's log writer and fence the first
    "spark.python.daemon.module": "spark_pipeline.engines.worker_daemon",  # workers forked with oncelog imported
    # Spark's list without kafka: Kafka's batch reads go through its DataSource V2 scan, as Structured Streaming's
    # do, whose reader makes each row once (V1's rows are copied once more): 0.2 of 2 CPU s on 1M records.
    "spark.sql.sources.useV1SourceList": "avro,csv,json,orc,parquet,text",
}


class TasksStopped(Exception):  # noqa: N818 (a signal, not an error: the launcher makes it RunCancelled)
    """A second signal: stop waiting for the run's tasks now. Internal: the launcher turns it into RunCancelled."""


class TasksAborted(OncelogError):
    """Spark aborted the run's tasks (an executor lost under one of them, which Spark may blame on the task): the
    outcomes of the others never reach the driver, so the run fails and publishes nothing."""

    def __init__(self, message: str, task_ids: Sequence[str]) -> None:
        super().__init__(message)
        self.task_ids = tuple(task_ids)


LOST_TASK = re.compile(r"Lost task (\d+)\.\d+ in stage")
"""How Spark names a lost task in a job's abort: its partition index, one MultiWorkUnit each (run_tasks)."""
ABORT_REASON = re.compile(
    r"most recent failure: Lost task [\d.]+ in stage [\d.]+ \(TID \d+\) \([^)]*\): (.+?)(?:\. |$)", re.MULTILINE)
"""Why Spark lost the task, the first sentence (`Python worker exited unexpectedly (crashed)`, `ExecutorLostFailure
(executor 0 exited …) Reason: …`); its Java cause underneath is an EOFException that says nothing."""


def spark_session(config: JobConfig) -> SparkSession:
    """The Spark session for a job: its spark.* settings over oncelog's defaults (spark-submit's win over both)."""
    # PySpark starts its Python workers with $PYSPARK_PYTHON (spark.pyspark.python is read by spark-submit only):
    # without it they would run the system's python3, which lacks oncelog's packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(f"oncelog {config.job_name}")
    submitted = submitted_settings()
    check_speculation(submitted, "set by spark-submit (--conf or spark-defaults.conf)")
    # Spark's Kafka, Avro and S3A connectors from the cache (spark.jars), unless the job or spark-submit gives them.
    settings = with_connectors({**SPARK_DEFAULTS, **config.spark_conf},
                               jvm_running="PYSPARK_GATEWAY_PORT" in os.environ)
    for key, value in settings.items():
        if key not in submitted:
            builder = builder.config(key, value)
    session = builder.getOrCreate()
    check_speculation(dict(session.sparkContext.getConf().getAll()), "in the running Spark session's configuration")
    return session


def submitted_settings() -> dict[str, str]:
    """The settings spark-submit set (its --master, --conf ...): they win over the job file's."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not started by spark-submit
        return {}
    # Without a connection to spark-submit's JVM, SparkConf() is an empty Python-side conf: connect first.
    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


def check_speculation(settings: Mapping[str, str], where: str) -> None:
    """Refuse speculative execution: a second copy of a running task would open the task's log writer (one name per
    task) and fence the first (each copy writes its own attempt folders: writers.py)."""
    value = settings.get(SPECULATION, "false").strip()
    if value.lower() != "false":
        raise ConfigError(f"{SPECULATION!r} is {value!r} {where}: oncelog needs it false, since a speculative copy of "
                          f"a task would open the task's log writer and fence the copy already running (oncelog "
                          f"retries tasks itself: task.maxretries)")


def task_writer_name(job: str, run_id: str, task_id: str) -> str:
    """The name of a task's log writer (a task is a MultiWorkUnit): opening it again (a cancelled run does, and the
    next run of the job when a dead run's task holds the log) fences the task."""
    return f"{job}.{run_id}.{task_id}"


def execute(config: JobConfig, run_id: str, mwu: MultiWorkUnit, log_url: str, log_settings: Mapping[str, str]
            ) -> TaskOutcome:
    """Run one task where it is (an executor), recording its attempts through a writer of its own.

    Spark runs a task again when its executor is lost (that does not count against spark.task.maxFailures): the
    new run's attempts are numbered after the lost one's, and its writer (same name) fences the lost one's."""
    context = TaskContext.get()
    first_attempt = (context.attemptNumber() if context else 0) * most_attempts(config, len(mwu.work_units)) + 1
    name = task_writer_name(config.job_name, run_id, mwu.multi_work_unit_id)
    with open_log(log_url, log_settings) as log, log.writer(name) as w:
        return run_task(config, run_id, mwu, w.append, first_attempt=first_attempt)


def run_tasks(spark: SparkSession, config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], log_url: str,
              log_settings: Mapping[str, str], progress: TaskProgress) -> list[TaskOutcome]:
    """Run every task on the cluster (one Spark task each) and bring their outcomes back; `progress` hears of each
    finished task (Spark merges a task's accumulator update into the driver's value when the task ends)."""
    settings = dict(log_settings)
    counts = spark.sparkContext.accumulator((0, 0), PairSum())

    def tasks(units: Iterable[MultiWorkUnit]) -> Iterable[TaskOutcome]:
        for unit in units:
            outcome = execute(config, run_id, unit, log_url, settings)
            counts.add((1, sum(r.records_written for r in outcome.written)))
            yield outcome

    kept = {key: spark.sparkContext.getLocalProperty(key) for key in JOB_GROUP_PROPERTIES}
    spark.sparkContext.setJobGroup(f"oncelog-{run_id}", f"{config.job_name} run {run_id}", interruptOnCancel=True)
    finished = threading.Event()
    poller = threading.Thread(target=report_progress, args=(counts, progress, finished), daemon=True,
                              name="oncelog-task-progress")
    poller.start()
    try:
        return spark.sparkContext.parallelize(mwus, len(mwus)).mapPartitions(tasks).collect()
    except Py4JError as e:
        raise tasks_aborted(e, mwus) from e
    finally:
        finished.set()
        poller.join()
        progress(*counts.value)
        for key, value in kept.items():  # a cancelled run's group cancels its later jobs: the caller's thread leaves it
            spark.sparkContext._jsc.setLocalProperty(key, value)  # None removes the property (PySpark's types say str)


def tasks_aborted(error: BaseException, mwus: Sequence[MultiWorkUnit]) -> TasksAborted:
    """Spark's abort of the run's tasks as our error: the tasks it lost (by partition index) and why."""
    text = full_text(error)
    indices = sorted({int(i) for i in LOST_TASK.findall(text) if int(i) < len(mwus)})
    lost = [mwus[i].multi_work_unit_id for i in indices]
    what = f"task {', '.join(lost)} lost" if lost else "a task lost"
    reason = ABORT_REASON.search(text)
    return TasksAborted(f"Spark aborted the run's tasks ({what}: {reason.group(1) if reason else root_cause(error)}); "
                        f"nothing was published, the next run pulls the same records again", lost)


class PairSum(AccumulatorParam):
    """Adds (tasks, records) pairs: the tasks' progress, summed on the driver."""

    def zero(self, value: tuple[int, int]) -> tuple[int, int]:
        return 0, 0

    def addInPlace(self, value1: tuple[int, int], value2: tuple[int, int]) -> tuple[int, int]:  # noqa: N802
        return value1[0] + value2[0], value1[1] + value2[1]


def report_progress(counts: Accumulator[tuple[int, int]], progress: TaskProgress, finished: threading.Event) -> None:
    """Pass the accumulated (tasks, records) on whenever it changes, until the tasks are over."""
    last = (0, 0)
    while not finished.wait(PROGRESS_POLL_S):
        now = counts.value
        if now != last:
            progress(*now)
            last = now


def slots(spark: SparkSession) -> int:
    """How many tasks run at once: the cluster's default parallelism."""
    return max(1, int(spark.sparkContext.defaultParallelism))


class SparkCommitEngine(CommitEngine):
    """One Spark task per commit shard, on the executors; each opens the log, the file systems and its shard's
    writer where it runs, and sends back a summary. A task that dies (its Python worker killed, its executor lost) is
    not run again (spark.task.maxFailures=1): ShardLostError, and the next run recovers the shard."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def run(self, config: JobConfig, work: Sequence[ShardWork], settings: CommitSettings) -> list[ShardSummary]:
        if not work:
            return []
        log_url, log_settings = config.log_url, dict(config.log_settings)

        def shards(assigned: Iterable[ShardWork]) -> Iterable[ShardSummary]:
            for shard in assigned:
                yield execute_shard(config, shard, log_url, log_settings, settings)

        run_id = work[0].run_id
        context = self.spark.sparkContext
        # A group of its own: cancelling the run (SIGINT) cancels its tasks, never a commit past its point of no return.
        context.setJobGroup(f"oncelog-{run_id}-commit", f"{config.job_name} run {run_id}: commit")
        try:
            return context.parallelize(list(work), len(work)).mapPartitions(shards).collect()
        except Py4JError as e:
            lost = ", ".join(str(w.shard) for w in work)
            raise ShardLostError(f"a task of commit shards {lost} died before it answered: "
                                 f"{str(e).strip().splitlines()[0][:500]}; what the shards appended stands, their "
                                 f"pending sequences are finished by the next run (or `oncelog recover`)") from e


def execute_shard(config: JobConfig, work: ShardWork, log_url: str, log_settings: Mapping[str, str],
                  settings: CommitSettings) -> ShardSummary:
    """Commit one shard where it is (an executor): its own log connection, file systems and writer."""
    with open_log(log_url, log_settings) as log:
        return commit_shard(work, log, FileSystems.of(config.properties), settings, job_publisher(config))
