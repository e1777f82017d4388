"""The crash matrix: the driver killed at every point of the publish protocol, then the job run again.

For both stores (on Kafka, each engine, commit path and policy once), both task engines, both the `full` and
`partial` commit policies, and both places a commit runs (shard tasks on the executors, where a point inside a shard
kills that task and then its driver; or the driver alone): every source record is published exactly once, watermarks
are exact, no published file is orphaned or duplicated, and `oncelog verify` passes.

The whole matrix kills the driver in this process (tests/fault/in_process_crash.py: after the point the driver makes
no I/O call, as if dead; a commit shard task, a process of its own, still exits for real), which spares a Python and
a Spark JVM per case. A few canaries per store still kill a real `oncelog run` process (ONCELOG_CRASH_AT), at a
point inside a commit shard and at one on the driver: the process boundary itself (os._exit, the kernel dropping the
job lock and connections, the Spark application dying with its driver) stays tested.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.commit import CommitSequencePlanned
from events.completeness import PartitionCompleted
from events.log import EventLog
from projections.views import RunStatus
from spark_pipeline.commit.faults import CRASH_EXIT_CODE, POINTS, FaultPoint
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.in_process_crash import driver_killed_in_process
from tests.fault.pipeline_checks import (
    DATASETS,
    PARTITIONS,
    RECORDS,
    assert_exactly_once,
    run_cli,
    write_job,
)

FAIL_AFTER = 30
"""With `partial`, dataset ds.1 fails every attempt after this many records: its partial output is published."""


MODES = [("full", "dataframe", "shards"), ("full", "dataframe", "driver"), ("full", "records", "shards"),
         ("partial", "records", "shards"), ("partial", "records", "driver")]
"""(job.commit.policy, task.engine, where the commit runs): each engine and each commit path under both policies
where the engine has them (the DataFrame engine publishes nothing of a failed task, so `partial` is the records
engine's)."""


KAFKA_MODES = [("full", "dataframe", "shards"), ("full", "records", "driver"), ("partial", "records", "shards")]
"""On Kafka, each engine, each commit path and each policy once: the store's own part (transactions, fencing, reads)
is the same under every mode, and the whole matrix runs on SQLite."""

CASES = [("sqlite", *mode) for mode in MODES] + [("kafka", *mode) for mode in KAFKA_MODES]

CANARIES = [
    (FaultPoint.AFTER_RENAME, "sqlite", "full", "records", "shards"),
    (FaultPoint.BEFORE_WATERMARK, "sqlite", "partial", "records", "driver"),
    (FaultPoint.BEFORE_COMPLETION, "kafka", "full", "dataframe", "shards"),
    (FaultPoint.AFTER_PLANNING, "kafka", "full", "records", "driver"),
]
"""The cases whose crash kills a real `oncelog run` process: per store, one point inside a commit shard task (on
an executor: its Python worker exits, then the driver) and one on the driver (the driver's own process exits)."""


@pytest.mark.parametrize(("store", "policy", "engine", "commit"), CASES, ids=["-".join(c) for c in CASES])
@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_any_point_then_a_rerun_publishes_exactly_once(point: FaultPoint, policy: str, engine: str,
                                                                   commit: str, event_log: EventLog, tmp_path: Path,
                                                                   spark: SparkSession) -> None:
    job = matrix_job(tmp_path, event_log, policy, engine, commit)
    with driver_killed_in_process(job, point, spark) as death:
        assert death.cause is not None and f"injected crash at {point}" in death.cause, death.cause
        if commit == "shards" and point.in_commit_shard:  # the shard task's process exited; the driver heard of it
            assert "in a commit shard task" in death.cause, death.cause
        rerun_publishes_exactly_once(job, point, policy, commit, event_log, tmp_path, spark)


@pytest.mark.parametrize(("point", "store", "policy", "engine", "commit"), CANARIES,
                         ids=["-".join(c) for c in CANARIES])
def test_a_process_killed_at_a_point_then_a_rerun_publishes_exactly_once(point: FaultPoint, policy: str, engine: str,
                                                                         commit: str, event_log: EventLog,
                                                                         tmp_path: Path, spark: SparkSession) -> None:
    job = matrix_job(tmp_path, event_log, policy, engine, commit)
    crashed = run_cli(job, crash_at=point)
    assert crashed.returncode == CRASH_EXIT_CODE, f"exit {crashed.returncode}\n{crashed.stderr[-3000:]}"
    assert f"injected crash at {point}" in crashed.stderr
    rerun_publishes_exactly_once(job, point, policy, commit, event_log, tmp_path, spark)


PARTITIONED: dict[str, object] = {
    "writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner",
    "writer.partition.columns": "offset", "writer.partition.timeUnit": "MINUTES", "writer.partition.timezone": "UTC",
    "writer.partition.prefix": "hourly"}
"""Time-partitioned output (each offset a minute: a run's records over four hours, a rerun's late ones in an hour a
run already published), for the modes that commit on the driver: each engine and policy publishes partition folders
through every crash point too."""


def matrix_job(base: Path, log: EventLog, policy: str, engine: str, commit: str) -> Path:
    """The matrix's job file: with `partial`, dataset ds.1 fails after FAIL_AFTER records on every attempt; the
    driver's commits publish time-partitioned output."""
    failing: dict[str, object] = {
        "source.synthetic.fail.attempts": 99, "source.synthetic.fail.after.records": FAIL_AFTER,
        "source.synthetic.fail.datasets": "ds.1"} if policy == "partial" else {}
    return write_job(base, log.url, policy, None, **failing, **(PARTITIONED if commit == "driver" else {}),
                     **{"task.engine": engine, "job.commit.on.executors": commit == "shards"})


def rerun_publishes_exactly_once(job: Path, point: str, policy: str, commit: str, log: EventLog, base: Path,
                                 spark: SparkSession) -> None:
    """Run the crashed job again (in this process, on `spark`): it ends as its policy says, and every record the
    crashed run and the rerun pulled is published exactly once."""
    again = JobLauncher(load_job_config(job), spark=spark).run()
    assert again.status is (RunStatus.COMMITTED if policy == "full" else RunStatus.FAILED), again.error
    if policy == "partial":
        assert again.error is not None and "commit" not in again.error and "shard" not in again.error, again.error

    watermarks = assert_exactly_once(log.url, base)
    if commit == "driver":  # time-partitioned: every published file in its hour's folder (PARTITIONED)
        files = [p.relative_to(base / "published").parts for p in (base / "published").rglob("*.avro")]
        assert files and all(parts[1:5] == ("hourly", "1970", "01", "01") for parts in files), files[:3]
    planned = planned_datasets(log, again.run_id)
    if point == "after-task-output" or commit == "driver":
        # Before planning nothing was planned; the driver plans every dataset in one batch, before any later point.
        assert planned == (set() if point == "after-task-output" else {f"ds.{d}" for d in range(DATASETS)})
    for d in range(DATASETS):
        # A shard's plan is its own batch: a dataset whose shard had not planned when the crash came is pulled again
        # by the rerun from where it was, so its crashed run's records are published by the rerun alone.
        published_runs = 2 if f"ds.{d}" in planned else 1
        for p in range(PARTITIONS):
            per_run = FAIL_AFTER if policy == "partial" and d == 1 else RECORDS
            assert watermarks[(f"ds.{d}", f"ds.{d}:{p}")] == per_run * published_runs, (
                f"ds.{d}:{p}; the crashed run planned {planned}; the rerun recovered {again.recovered}, "
                f"skipped {again.skipped}, committed {again.commits}")


def planned_datasets(log: EventLog, rerun_id: str) -> set[str]:
    """The datasets whose commit sequence the crashed run planned (its driver or shard tasks, before the rerun fenced
    them: a plan is in the log or never will be)."""
    return {e.event.dataset_urn for e in log.read()
            if isinstance(e.event, CommitSequencePlanned) and e.event.run_id != rerun_id}


@pytest.mark.parametrize("store", ["sqlite"])
def test_a_crash_after_the_completeness_step_neither_loses_nor_doubles_a_partition_completed(
        event_log: EventLog, tmp_path: Path, spark: SparkSession) -> None:
    """The driver dies once a sequence's Completeness step has written its `_SUCCESS` markers and before its events
    are recorded: the rerun's recovery records each PartitionCompleted of the crashed run once (its markers found
    there), and completes the later hours itself; every hour of every dataset completed exactly once."""
    job = write_job(tmp_path, event_log.url, "full", None, **PARTITIONED,
                    **{"task.engine": "records", "job.commit.on.executors": False,
                       "writer.partition.success.file": True})
    point = FaultPoint.AFTER_COMPLETENESS
    with driver_killed_in_process(job, point, spark) as death:
        assert death.cause is not None and f"injected crash at {point}" in death.cause, death.cause
        markers = sorted((tmp_path / "published").rglob("_SUCCESS"))
        assert markers, "the crashed sequence wrote its markers before the crash"
        crashed = [e.event for e in event_log.read() if isinstance(e.event, PartitionCompleted)]
        assert crashed == [], "nothing of the step was recorded before the crash"
        rerun_publishes_exactly_once(job, point, "full", "driver", event_log, tmp_path, spark)
    completed = [e.event for e in event_log.read() if isinstance(e.event, PartitionCompleted)]
    per_partition = Counter((e.dataset_urn, e.partition) for e in completed)
    assert per_partition and set(per_partition.values()) == {1}, per_partition
    first_run = {e.run_id for e in completed} - {max(e.run_id for e in completed)}
    assert first_run, "the crashed run's sequences completed hours, recorded by the recovery"
    assert sorted(str(p.relative_to(tmp_path / "published").parent) for p in
                  (tmp_path / "published").rglob("_SUCCESS")) == sorted(f"{u}/{p}" for u, p in per_partition)
