"""The DataFrame task engine: each task (MultiWorkUnit) is one Spark job reading its work units as one DataFrame and
writing them with Spark's writers, its attempts recorded by the driver through the task's own log writer.

A task's TaskStarted is appended before its Spark job, its TaskSucceeded / TaskFailed after; `task.maxretries`
retries an attempt in a fresh attempt folder. Tasks run concurrently (one driver thread each, in the run's Spark job
group, so a cancellation cancels them). A failed attempt leaves no output: Spark's commit protocol is all or nothing
per job, so there is no partial result for the `partial` commit policy to publish.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql import Observation, SparkSession

from events.errors import ConfigError
from events.log import open_log
from events.job import WorkUnitSpec
from events.model import Event, TaskFields
from events.task import TaskFailed, TaskRetried, TaskStarted, TaskSucceeded, WorkUnitResult
from filesystems import urls
from filesystems.router import FileSystems
from spark_pipeline.config import JobConfig, TaskEngineKind, WriterOutputFormat
from spark_pipeline.connectors import Connector, given_connectors
from spark_pipeline.constructs import MultiWorkUnit
from spark_pipeline.dataframe import stages
from spark_pipeline.dataframe.choice import EngineChoice, SourceKind, choose
from spark_pipeline.dataframe.avro_types import converted_schema
from spark_pipeline.dataframe.errfile import write_diverted
from spark_pipeline.dataframe.record_stages import Attempt
from spark_pipeline.dataframe.task_policies import check_units
from spark_pipeline.dataframe.results import (
    counted,
    move_files,
    observed,
    staged_files,
    unit_counts,
    unit_metrics,
    unit_results,
)
from spark_pipeline.dataframe.sources import read_units, source_kind
from spark_pipeline.dataframe.writers import WriterSettings, write_attempt
from spark_pipeline.task_flow import TaskQualityError
from spark_pipeline.spark_runner import TaskProgress, submitted_settings, task_writer_name
from spark_pipeline.task_engine import SparkTaskEngine, TaskEngine, job_group
from spark_pipeline.task_runner import TaskOutcome, executor_name
from spark_pipeline.writers import path_segment

Emit = Callable[[Sequence[Event]], object]
log = logging.getLogger(__name__)
ERROR_CHARS = 4000


def engine_for(config: JobConfig, spark: SparkSession | None = None) -> TaskEngine:
    """The engine `task.engine` chooses for the job (auto: dataframe when it can run every construct); its writer
    settings checked before anything runs (a ConfigError naming the key)."""
    choice = choose(config)
    missing = missing_connectors(config, submitted_settings()) if choice.kind is TaskEngineKind.DATAFRAME else []
    if missing:
        what = (f"spark-submit was not given Spark's {' and '.join(missing)} connector(s): pass "
                f"`spark-submit $(oncelog spark jars) …`")
        if config.task_engine is TaskEngineKind.DATAFRAME:
            raise ConfigError(f"task.engine=dataframe: {what}")
        choice = EngineChoice(TaskEngineKind.RECORDS, f"task.engine=auto chose records: {what}")
    if choice.kind is TaskEngineKind.DATAFRAME:
        WriterSettings.of(config, converted_schema(config))
        return DataFrameTaskEngine(config, spark, choice)
    return SparkTaskEngine(config, spark, choice)


def missing_connectors(config: JobConfig, submitted: Mapping[str, str]) -> list[str]:
    """The connectors the job's DataFrame stages need that spark-submit did not give (none when oncelog started
    Spark itself: spark_session puts them on the classpath)."""
    if not submitted:
        return []
    needed = {Connector.KAFKA} if source_kind(config) is SourceKind.KAFKA else set()
    if config.writer_output_format is WriterOutputFormat.AVRO:
        needed.add(Connector.AVRO)
    return sorted(c.value for c in needed - given_connectors(submitted))


@dataclass(frozen=True)
class TaskPlan:
    """What every task of a run shares: its job, run, writer settings and retry count."""

    config: JobConfig
    run_id: str
    writer: WriterSettings

    @property
    def attempts(self) -> int:
        """Attempts per task: the first and `task.maxretries` retries."""
        return 1 + self.config.task_max_retries


class DataFrameTaskEngine(SparkTaskEngine):
    """Runs each task as one Spark DataFrame job (same events and staged output as the record engine)."""

    def __init__(self, config: JobConfig, spark: SparkSession | None = None, choice: EngineChoice | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(config, spark, choice or EngineChoice(TaskEngineKind.DATAFRAME, "given by the caller"))
        self.sleep = sleep

    def run(self, config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], progress: TaskProgress
            ) -> list[TaskOutcome]:
        plan = TaskPlan(config, run_id, WriterSettings.of(config, converted_schema(config)))
        check_stages(self.spark, config, mwus)
        lock = threading.Lock()
        done = [0, 0]

        def task(mwu: MultiWorkUnit) -> TaskOutcome:
            outcome = self._task(plan, mwu)
            with lock:
                done[0] += 1
                done[1] += sum(r.records_written for r in outcome.results)
                progress(done[0], done[1])
            return outcome

        with ThreadPoolExecutor(max_workers=max(1, len(mwus)), thread_name_prefix="oncelog-df-task") as pool:
            return list(pool.map(task, mwus))

    def _task(self, plan: TaskPlan, mwu: MultiWorkUnit) -> TaskOutcome:
        """One task with its retries, recorded through its own writer (pinned threads: its own Spark job group)."""
        config, run_id = plan.config, plan.run_id
        self.spark.sparkContext.setJobGroup(job_group(run_id), f"{config.job_name} run {run_id} task "
                                            f"{mwu.multi_work_unit_id}", interruptOnCancel=True)
        with open_log(config.log_url, config.log_settings) as log, \
                log.writer(task_writer_name(config, run_id, mwu)) as writer:
            return run_task(self.spark, plan, mwu, writer.append, self.sleep)


def run_task(spark: SparkSession, plan: TaskPlan, mwu: MultiWorkUnit, emit: Emit,
             sleep: Callable[[float], None]) -> TaskOutcome:
    """A task's attempts: TaskStarted, the Spark job, then TaskSucceeded, or TaskFailed (and TaskRetried)."""
    config = plan.config
    task: TaskFields = {"job": config.job_name, "run_id": plan.run_id, "task_id": mwu.multi_work_unit_id}
    unit_ids = tuple(u.work_unit_id for u in mwu.work_units)
    for attempt in range(1, plan.attempts + 1):
        started = time.perf_counter()
        emit(TaskStarted(**task, attempt=attempt, work_unit_ids=unit_ids, executor=executor_name()).in_parts())
        try:
            results = run_attempt(spark, plan, mwu, attempt)
        except Exception as e:
            error = attempt_error(e)
            emit(TaskFailed(**task, attempt=attempt, error=error, results=(),
                            duration_ms=_since(started)).in_parts())
            if attempt == plan.attempts:
                return TaskOutcome(mwu.multi_work_unit_id, False, attempt, (), error.splitlines()[0])
            delay = float(config.task_retry_interval_s)
            emit([TaskRetried(**task, attempt=attempt, next_attempt=attempt + 1, delay_s=delay,
                              reason=error.splitlines()[0])])
            sleep(delay)
            continue
        except BaseException as stopped:  # interrupted: the attempt still ends in the log
            emit([TaskFailed(**task, attempt=attempt, error=attempt_error(stopped), results=(),
                             duration_ms=_since(started))])
            raise
        emit(TaskSucceeded(**task, attempt=attempt, results=results, duration_ms=_since(started)).in_parts())
        return TaskOutcome(mwu.multi_work_unit_id, True, attempt, results)
    raise AssertionError("unreachable: the last attempt returns")


def run_attempt(spark: SparkSession, plan: TaskPlan, mwu: MultiWorkUnit, attempt: int
                ) -> tuple[WorkUnitResult, ...]:
    """Read, write (Spark's commit protocol) into a fresh attempt folder, judge the counts by the task-level policies,
    then move each file to the task output and write the diverted records to the error file."""
    config, units = plan.config, mwu.work_units
    branch = config.branch(0)
    folder = urls.join(str(branch.writer_staging_dir), plan.run_id, path_segment(mwu.multi_work_unit_id),
                       f"attempt-{attempt}")
    frame = read_units(spark, config, units, attempt)
    if frame is None:
        zeros = [0] * len(units)
        judge_units(config, units, zeros, zeros, zeros, folder)
        return unit_results(units, zeros, [None] * len(units), [])
    read = None if source_kind(config) is SourceKind.SYNTHETIC else Observation()
    staged = stages.transform(config, frame if read is None else frame.observe(read, *unit_metrics(units)),
                              Attempt(plan.run_id, mwu.multi_work_unit_id, attempt, units))
    wrote = Observation() if staged.drops else None
    try:
        write_attempt(staged.written if wrote is None else staged.written.observe(wrote, *unit_counts(units)),
                      plan.writer, folder)
        records, last_offsets = read_counts(units, read)
        written = records if wrote is None else counted(wrote, units)
        judge_units(config, units, records, written, staged.rejected_counts(len(units)), folder)
        output_root = urls.join(str(branch.writer_output_dir), plan.run_id)
        staged_out = staged_files(FileSystems.of(config.properties), folder, units, output_root)
        results = unit_results(units, records, last_offsets, move_files(spark, config.properties, staged_out),
                               written=written)
        diverted = write_diverted(config.row_err_file, plan.run_id, mwu.multi_work_unit_id, units, staged.diverted)
    finally:
        staged.release()
    if staged.flagged or diverted:
        log.info("task %s attempt %d: %d record(s) failed an OPTIONAL row policy, %d diverted to the error file",
                 mwu.multi_work_unit_id, attempt, staged.flagged_count(), diverted)
    return results


def read_counts(units: Sequence[WorkUnitSpec], read: Observation | None) -> tuple[list[int], list[int | None]]:
    """Each work unit's records read and last offset: the plan's for the synthetic source (one record per offset),
    else what Spark observed (Kafka: transaction markers and aborted records take offsets)."""
    if read is not None:
        return observed(read, units)
    records = [u.expected_high_watermark - u.low_watermark for u in units]
    return records, [u.expected_high_watermark - 1 if n else None for u, n in zip(units, records)]


def judge_units(config: JobConfig, units: Sequence[WorkUnitSpec], read: list[int], written: list[int],
                rejected: list[int], folder: str) -> None:
    """The job's task-level policies on each work unit's counts; a MANDATORY failure drops the attempt's output."""
    if not config.branch(0).task_policies:
        return
    try:
        check_units(config, units, read, written, rejected)
    except TaskQualityError:
        FileSystems.of(config.properties).remove_tree(folder)
        raise


def check_stages(spark: SparkSession, config: JobConfig, mwus: Sequence[MultiWorkUnit]) -> None:
    """The job's SQL stages analysed over the source's columns before any task starts (a ConfigError naming the key:
    Spark analyses without reading a record)."""
    units = [u for mwu in mwus for u in mwu.work_units if u.expected_high_watermark > u.low_watermark][:1]
    frame = read_units(spark, config, units, 1) if units and stages.has_stages(config) else None
    if frame is not None:
        stages.transform(config, frame, Attempt("planning", "planning", 1, tuple(units))).release()


def attempt_error(error: BaseException) -> str:
    """An attempt's error for its TaskFailed: type and message first (Spark's Java trace cut), then where."""
    message = str(error).strip()
    first = message.split("\n\tat ", 1)[0][:2000]
    where = "".join(traceback.format_exception(error)[-3:]).strip()[-1500:]
    return f"{type(error).__name__}: {first}\n{where}"[:ERROR_CHARS]


def _since(started: float) -> int:
    """Milliseconds since a perf_counter reading."""
    return int((time.perf_counter() - started) * 1000)
