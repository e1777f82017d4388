"""A task's attempts end recorded whatever fails: the partial commit of a last attempt, an interruption, the task's
process killed under it (the run then fails with a summary, never a traceback); and Spark never runs a second,
speculative attempt of a task beside the first (it would fence the first's log writer)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.job import JobRunFailed, WorkUnitSpec
from events.log import open_log
from events.model import Event
from events.task import TaskEvent, TaskFailed, TaskRetried, TaskStarted, TaskSucceeded
from projections.views import RunStatus
from spark_pipeline.constructs import (
    Converter,
    Extractor,
    MultiWorkUnit,
    Record,
    RowLevelPolicy,
    Schema,
    SourceState,
    WorkUnitState,
)
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.engines.records.task import run_task
from spark_pipeline.engines.spark import tasks_aborted
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import config_from_properties, load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.sources.synthetic import SyntheticExtractor, SyntheticSource
from spark_pipeline.writers import path_segment
from tests.fault.pipeline_checks import RECORDS, assert_exactly_once, write_job

ROOT = Path(__file__).parents[3]
RUN_ID = "20261121T120000123Z-abcdef"
URN, PARTITION = "ds.0", "ds.0:0"
FAIL_AFTER = 4  # the synthetic source fails at this offset, in every attempt


class InterruptedExtractor(SyntheticExtractor):
    """Reads a few records, then is interrupted as a Ctrl-C would interrupt it."""

    def read_record(self) -> Record | None:
        if self.next_watermark == FAIL_AFTER:
            raise KeyboardInterrupt
        return super().read_record()


class InterruptedSource(SyntheticSource):
    """The synthetic source, interrupted while it extracts."""

    def get_extractor(self, state: WorkUnitState) -> Extractor:
        return InterruptedExtractor(state, self.settings())


class Recorder:
    """The `emit` of a task: keeps every event, in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, events: Sequence[Event]) -> None:
        self.events.extend(events)

    def kinds(self) -> list[tuple[str, int]]:
        """(type, attempt) of each event: a task emits task events only."""
        kinds = []
        for e in self.events:
            assert isinstance(e, TaskEvent), e
            kinds.append((type(e).__name__, e.attempt))
        return kinds


def config_of(tmp_path: Path, **extra: str) -> JobConfig:
    """A synthetic job with the default writer and publisher, whose every attempt fails after FAIL_AFTER records."""
    return config_from_properties({
        "job.name": "failing", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "source.synthetic.datasets": "1", "source.synthetic.partitions": "1",
        "source.synthetic.fail.attempts": "9", "source.synthetic.fail.after.records": str(FAIL_AFTER),
        "dataset.urn": "ds", "task.maxretries": "1", "task.retry.intervalinsec": "0", "job.commit.policy": "partial",
        "writer.staging.dir": str(tmp_path / "staging"), "writer.output.dir": str(tmp_path / "task-output"),
        "data.publisher.final.dir": str(tmp_path / "published"), **extra})


def one_task() -> MultiWorkUnit:
    unit = WorkUnitSpec(work_unit_id=f"{PARTITION}@0", dataset_urn=URN, partition=PARTITION, low_watermark=0,
                        expected_high_watermark=10, estimated_records=10, properties={"synthetic.partition": "0"})
    return MultiWorkUnit("task-00000", (unit,))


def partial_file(tmp_path: Path) -> Path:
    """Where the last attempt's (2) partial commit moves the records it fully wrote (offsets 0 to FAIL_AFTER): the
    attempt's own task-output folder."""
    return (tmp_path / "task-output" / RUN_ID / "task-00000" / "attempt-2" / path_segment(URN)
            / f"{path_segment(PARTITION)}_0-{FAIL_AFTER}.avro")


def test_the_last_attempt_commits_what_it_fully_wrote(tmp_path: Path) -> None:
    emit = Recorder()
    outcome = run_task(config_of(tmp_path), RUN_ID, one_task(), emit, sleep=lambda _: None)
    assert emit.kinds() == [("TaskStarted", 1), ("TaskFailed", 1), ("TaskRetried", 1), ("TaskStarted", 2),
                            ("TaskFailed", 2)]
    assert not outcome.succeeded and outcome.attempts == 2 and outcome.results == ()
    (partial,) = outcome.partial
    assert partial.actual_high_watermark == FAIL_AFTER and partial.records_written == FAIL_AFTER
    assert [f.path for f in partial.output_files] == [str(partial_file(tmp_path))]


def test_a_failing_partial_commit_still_ends_the_attempt_with_task_failed(tmp_path: Path) -> None:
    blocker = partial_file(tmp_path)
    blocker.mkdir(parents=True)  # a directory where the partial file must go: moving it there raises an OSError
    emit = Recorder()
    outcome = run_task(config_of(tmp_path), RUN_ID, one_task(), emit, sleep=lambda _: None)
    assert emit.kinds() == [("TaskStarted", 1), ("TaskFailed", 1), ("TaskRetried", 1), ("TaskStarted", 2),
                            ("TaskFailed", 2)]
    last = emit.events[-1]
    assert isinstance(last, TaskFailed) and last.results == ()
    assert f"injected failure at offset {FAIL_AFTER}" in last.error
    assert ("then handling the failed work unit's output failed: FileSystemError: the rename of "
            in last.error) and "failed: EISDIR: Is a directory" in last.error
    assert str(blocker) in last.error
    assert not outcome.succeeded and outcome.written == () and "EISDIR" in str(outcome.error)
    assert blocker.is_dir() and not any(blocker.iterdir())  # nothing half-published in its place


def test_an_interrupted_attempt_is_recorded_as_failed_before_the_interruption_goes_on(tmp_path: Path) -> None:
    emit = Recorder()
    config = config_of(tmp_path, **{"source.class": f"{__name__}.InterruptedSource"})
    with pytest.raises(KeyboardInterrupt):
        run_task(config, RUN_ID, one_task(), emit, sleep=lambda _: None)
    assert emit.kinds() == [("TaskStarted", 1), ("TaskFailed", 1)]
    last = emit.events[-1]
    assert isinstance(last, TaskFailed) and last.error.startswith("attempt stopped by KeyboardInterrupt")


@pytest.mark.spark
def test_spark_submit_with_speculation_on_is_refused_before_any_task(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url)
    submit = Path(sys.executable).parent / "spark-submit"
    result = subprocess.run([str(submit), "--master", "local[1]", "--conf", "spark.speculation=true",
                             str(ROOT / "oncelog" / "__main__.py"), "run", str(job), "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    said = " ".join((result.stdout + result.stderr).split())  # spark-submit passes the driver's stderr to stdout
    assert result.returncode == 2, said[-3000:]
    assert ("error: 'spark.speculation' is 'true' set by spark-submit (--conf or spark-defaults.conf): oncelog needs "
            "it false") in said
    with open_log(url) as log:
        events = [i.event for i in log.read()]
    assert not any(isinstance(e, TaskStarted | TaskSucceeded | TaskRetried) for e in events)
    assert not (tmp_path / "published").exists()


class FirstRunOnlySource(SyntheticSource):
    """Plans work units on a job's first run only: a later run pulls only what the retry policy re-plans."""

    def get_work_units(self, state: SourceState) -> list[WorkUnitSpec]:
        return [] if state.dataset_states else super().get_work_units(state)


def test_the_next_run_retries_the_work_units_the_previous_run_failed(tmp_path: Path) -> None:
    """workunit.retry.policy=always: the failed work units of run 1, which run 2's own plan does not cover, are
    planned again by run 2 from their committed watermarks (the previous run is the one before, not run 2 itself)."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    keys = {"source.class": f"{__name__}.FirstRunOnlySource", "source.synthetic.datasets": 2,
            "source.synthetic.fail.datasets": "ds.1", "source.synthetic.fail.after.records": FAIL_AFTER,
            "workunit.retry.policy": "always"}
    # ds.1's work units fail in their task (attempt 1), alone (2) and in their one retry (3): engines.isolation
    failing = load_job_config(write_job(tmp_path, url, "partial", None, **keys,
                                        **{"source.synthetic.fail.attempts": 3}))
    fixed = load_job_config(write_job(tmp_path, url, "partial", None, **keys))
    with open_log(url) as log:
        first = JobLauncher(failing, engine=InProcessTaskEngine(log.writer), log=log).run()
        assert first.status is RunStatus.FAILED and {c.dataset_urn for c in first.commits} == {"ds.0", "ds.1"}
        second = JobLauncher(fixed, engine=InProcessTaskEngine(log.writer), log=log).run()
    assert second.status is RunStatus.COMMITTED, second.error
    watermarks = assert_exactly_once(url, tmp_path)
    # The range run 1 planned, [0, RECORDS), finished from where it stopped (FAIL_AFTER).
    assert {p: w for (urn, p), w in watermarks.items() if urn == "ds.1"} == {"ds.1:0": RECORDS, "ds.1:1": RECORDS}


class Evens(RowLevelPolicy):
    """Drops every odd offset's record (as MANDATORY): a task-level check of counts then fails."""

    def check(self, record: Record) -> bool:
        return bool(record["offset"] % 2 == 0)


def test_a_work_unit_its_mandatory_task_policy_refuses_keeps_nothing_even_under_partial(tmp_path: Path) -> None:
    """Under job.commit.policy=partial the last attempt keeps what it fully wrote: not when a MANDATORY task-level
    policy refused the work unit (Gobblin: that output must not be committed)."""
    config = config_of(tmp_path, **{
        "source.synthetic.fail.attempts": "0", "qualitychecker.row.policies": f"{__name__}.Evens",
        "qualitychecker.row.policy.types": "MANDATORY",
        "qualitychecker.task.policies": "spark_pipeline.examples.policies.WroteEverything",
        "qualitychecker.task.policy.types": "MANDATORY"})
    emit = Recorder()
    outcome = run_task(config, RUN_ID, one_task(), emit, sleep=lambda _: None)
    assert not outcome.succeeded and outcome.attempts == 2
    assert "task-level policy WroteEverything failed" in str(outcome.error)
    assert outcome.written == ()
    assert all(e.results == () for e in emit.events if isinstance(e, TaskFailed))
    assert not list((tmp_path / "task-output").rglob("*.avro"))


def test_an_executor_lost_under_a_task_is_named_with_spark_s_reason() -> None:
    """The abort Spark raises when it blames a task for its executor's death (a worker killed under it)."""
    abort = RuntimeError(
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 0.0 failed 1 times, most "
        "recent failure: Lost task 1.0 in stage 0.0 (TID 1) (192.0.2.2 executor 0): ExecutorLostFailure (executor 0 "
        "exited caused by one of the running tasks) Reason: Remote RPC client disassociated. Likely due to containers "
        "exceeding thresholds, or network issues. Check driver logs for WARN messages.\nDriver stacktrace:\n\tat x")
    mwus = [MultiWorkUnit(f"task-0000{i}", ()) for i in range(2)]
    aborted = tasks_aborted(abort, mwus)
    assert aborted.task_ids == ("task-00001",)
    assert str(aborted) == ("Spark aborted the run's tasks (task task-00001 lost: ExecutorLostFailure (executor 0 "
                            "exited caused by one of the running tasks) Reason: Remote RPC client disassociated); "
                            "nothing was published, the next run pulls the same records again")


class WorkerKiller(Converter):
    """Kills the Python worker running its task at ds.1's first record, as the kernel's OOM killer would."""

    def convert_schema(self, input_schema: Schema, state: WorkUnitState) -> Schema:
        return input_schema

    def convert_record(self, output_schema: Schema, record: Record, state: WorkUnitState) -> Iterable[Record]:
        if state.work_unit.dataset_urn == "ds.1":
            os._exit(137)
        yield record


@pytest.mark.spark
def test_a_task_whose_process_dies_fails_the_run_with_its_summary_naming_the_task(spark: SparkSession,
                                                                                  tmp_path: Path) -> None:
    """Spark aborts the job when a task's process dies (spark.task.maxFailures=1): the run ends FAILED with a summary
    naming the lost task and Spark's reason (the CLI prints it; it raised Py4JJavaError before), records its end,
    publishes nothing; the next run publishes every record exactly once."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    keys = {"task.engine": "records", "converter.classes": f"{__name__}.{WorkerKiller.__qualname__}"}
    result = JobLauncher(load_job_config(write_job(tmp_path, url, "partial", None, **keys)), spark=spark).run()
    assert result.status is RunStatus.FAILED, result
    error = result.error or ""
    assert error.startswith("Spark aborted the run's tasks (task ") and "Python worker exited" in error, error
    with open_log(url) as log:
        [failed] = [e.event for e in log.read() if isinstance(e.event, JobRunFailed)]
    assert failed.failed_tasks and all(task in error for task in failed.failed_tasks), (failed, error)
    assert not list((tmp_path / "published").rglob("*.avro")), "the failed run published"
    rerun = JobLauncher(load_job_config(write_job(tmp_path, url, "partial", None, **{"task.engine": "records"})),
                        spark=spark).run()
    assert rerun.status is RunStatus.COMMITTED, rerun.error
    assert_exactly_once(url, tmp_path)
