"""The DataFrame task engine: each task (MultiWorkUnit) is one Spark job reading its work units as one DataFrame and
writing them with Spark's writers, its attempts recorded by the driver through the task's own log writer.

A task's TaskStarted is appended before its Spark job, its TaskSucceeded / TaskFailed after; `task.maxretries`
retries an attempt in fresh attempt folders (in staging, and in task output: writers.attempt_output_dir). Tasks run
concurrently (one driver thread each, in the run's Spark job group, so a cancellation cancels them). A failed attempt
leaves no output: Spark's commit protocol is all or nothing per job, so there is no partial result for the `partial`
commit policy to publish.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from events.job import WorkUnitSpec
from events.log import open_log
from events.task import (
    WorkUnitResult,
)
from filesystems import urls
from filesystems.router import FileSystems
from spark_pipeline.constructs import MultiWorkUnit, ReadCount, TaskLevelPolicy, TaskStats, UnitKey
from spark_pipeline.engines.attempts import AttemptPlan, AttemptsCancelled, Emit, TaskOutcome
from spark_pipeline.engines.avro_types import converted_schema
from spark_pipeline.engines.base import SparkTaskEngine, job_group
from spark_pipeline.engines.choice import EngineChoice
from spark_pipeline.engines.dataframe import stages
from spark_pipeline.engines.dataframe.errfile import write_diverted
from spark_pipeline.engines.dataframe.partitions import with_partition
from spark_pipeline.engines.dataframe.record_stages import Attempt
from spark_pipeline.engines.dataframe.results import (
    KEYED_FORMATS,
    MovedFile,
    StagedFile,
    counted,
    file_counts,
    keyed_files,
    move_files,
    observed,
    staged_files,
    unit_counts,
    unit_metrics,
    unit_results,
)
from spark_pipeline.engines.dataframe.sources import (
    frame_reader,
    read_units,
)
from spark_pipeline.engines.dataframe.writers import WriterSettings, hadoop_options, write_attempt
from spark_pipeline.engines.emit_ahead import AheadEmitter
from spark_pipeline.engines.isolation import run_task_attempts
from spark_pipeline.engines.policies import TaskQualityError, check_task
from spark_pipeline.engines.spark import (
    TaskProgress,
    TasksStopped,
    task_writer_name,
)
from spark_pipeline.jobfile.config import (
    JobCommitPolicy,
    JobConfig,
    TaskEngineKind,
    WriterOutputFormat,
)
from spark_pipeline.jobfile.partitions import TimePartitioning, partitioning_of
from spark_pipeline.jobfile.plugins import make_construct
from spark_pipeline.writers import attempt_output_dir, path_segment

log = logging.getLogger(__name__)
TASK_POLICIES_KEY = "qualitychecker.task.policies"


def branch_writers(config: JobConfig, schema: str | None) -> tuple[WriterSettings, ...]:
    """Each branch's writer settings, in branch order (one for an unforked job)."""
    return tuple(WriterSettings.of(config, schema, i) for i in range(config.fork_branches))


@dataclass(frozen=True)
class TaskPlan:
    """What every task of a run shares: its job, run, each branch's writer settings and retry count."""

    config: JobConfig
    run_id: str
    writers: tuple[WriterSettings, ...]
    partitioning: TimePartitioning | None = None
    """The job's time partitioner (writer.partitioner.class), if it has one."""
    key: UnitKey | None = None
    """What names each file's work unit when its records do (file_key): then no folder per work unit."""


class DataFrameTaskEngine(SparkTaskEngine):
    """Runs each task as one Spark DataFrame job (same events and staged output as the record engine)."""

    def __init__(self, config: JobConfig, spark: SparkSession | None = None, choice: EngineChoice | None = None,
                 sleep: Callable[[float], None] | None = None) -> None:
        super().__init__(config, spark, choice or EngineChoice(TaskEngineKind.DATAFRAME, "given by the caller"))
        self.sleep = sleep
        """The retry pause (tests skip it); None: a pause a cancellation cuts short."""

    def pause(self, seconds: float) -> None:
        """A retry's pause; AttemptsCancelled once the run is cancelled (no attempt starts after a cancel)."""
        if self.sleep is None:
            super().pause(seconds)
            return
        self.sleep(seconds)
        if self.cancelled.is_set():
            raise AttemptsCancelled("the run is cancelled: no further attempt")

    def slots(self) -> int:
        """Under job.commit.policy=full, one task per run: a failed task fails the run anyway, and the task's Spark
        job spreads its partitions over every executor itself, so more tasks would only add Spark jobs (each with its
        fixed cost) competing for them. Under successful (or partial), a task per core as on the records engine, so
        that a failing work unit fails only the task it is packed into."""
        if self.config.job_commit_policy is JobCommitPolicy.FULL:
            return 1
        return super().slots()

    def run(self, config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], progress: TaskProgress
            ) -> list[TaskOutcome]:
        units = [u for mwu in mwus for u in mwu.work_units]
        writers = branch_writers(config, writer_schema(config, units))
        plan = TaskPlan(config, run_id, writers, partitioning_of(config.properties), file_key(config, writers))
        check_stages(self.spark, config, mwus)
        lock = threading.Lock()
        done = [0, 0]

        def task(mwu: MultiWorkUnit) -> TaskOutcome:
            outcome = self._task(plan, mwu)
            with lock:
                done[0] += 1
                done[1] += sum(r.records_written for r in outcome.written)
                progress(done[0], done[1])
            return outcome

        pool = ThreadPoolExecutor(max_workers=max(1, len(mwus)), thread_name_prefix="oncelog-df-task")
        stopped = False
        try:
            return list(pool.map(task, mwus))
        except TasksStopped:  # a second signal: stop waiting for the tasks (their writers are fenced next)
            stopped = True
            raise
        finally:
            pool.shutdown(wait=not stopped, cancel_futures=stopped)

    def _task(self, plan: TaskPlan, mwu: MultiWorkUnit) -> TaskOutcome:
        """One task with its retries, recorded through its own writer (pinned threads: its own Spark job group), its
        events appended while its Spark jobs run (emit_ahead)."""
        config, run_id = plan.config, plan.run_id
        self.spark.sparkContext.setJobGroup(job_group(run_id), f"{config.job_name} run {run_id} task "
                                            f"{mwu.multi_work_unit_id}", interruptOnCancel=True)
        name = task_writer_name(config.job_name, run_id, mwu.multi_work_unit_id)
        with open_log(config.log_url, config.log_settings) as log, AheadEmitter(lambda: log.writer(name)) as events:
            outcome = run_task(self.spark, plan, mwu, events.emit, self.pause, self.cancelled)
            events.drain()
            return outcome


def run_task(spark: SparkSession, plan: TaskPlan, mwu: MultiWorkUnit, emit: Emit,
             sleep: Callable[[float], None], cancelled: threading.Event) -> TaskOutcome:
    """A task's attempts, each one Spark job (a failed attempt leaves no output, so no partial results); its failing
    work units isolated (engines.isolation). An attempt that fails once the run is `cancelled` was stopped by it
    (Spark cancels the run's jobs): recorded as stopped, with no retry."""
    def attempt(part: MultiWorkUnit, number: int, _last: bool) -> tuple[WorkUnitResult, ...]:
        try:
            return run_attempt(spark, plan, part, number)
        except Exception as e:
            if cancelled.is_set():
                raise AttemptsCancelled("the run was cancelled while it ran (Spark cancelled its job)") from e
            raise

    return run_task_attempts(plan.config, plan.run_id, mwu, attempt, AttemptPlan.of(plan.config), emit, sleep)


def run_attempt(spark: SparkSession, plan: TaskPlan, mwu: MultiWorkUnit, attempt: int
                ) -> tuple[WorkUnitResult, ...]:
    """Read, then write every branch (Spark's commit protocol) into a fresh attempt folder of the branch, judge the
    counts by the task-level policies, then, once every branch is written, move each file to its branch's task output
    and write the diverted records to the error file. A forked job's records are cached once and written once per
    branch."""
    config, units = plan.config, mwu.work_units
    frame = read_units(spark, config, units, attempt)
    if frame is None:
        zeros = [0] * len(units)
        judge_units(config, units, zeros, zeros, zeros, [])
        return unit_results(units, zeros, [None] * len(units), [])
    counts = frame_reader(config).READ_COUNT
    counting = read_counting(config, plan.writers)
    read = Observation() if counting is Counting.OBSERVED else None
    if read is not None:  # Kafka's markers take offsets, a file's records are counted: Spark counts them
        frame = frame.observe(read, *unit_metrics(units, "offset" if counts is ReadCount.OFFSETS else None))
    staged = stages.transform(config, frame, Attempt(plan.run_id, mwu.multi_work_unit_id, attempt, units))
    wrote = Observation() if staged.drops else None
    records_frame = staged.written if wrote is None else staged.written.observe(wrote, *unit_counts(units))
    if plan.partitioning is not None:
        records_frame = with_partition(records_frame, plan.partitioning, stages.where(records_frame),
                                       one_dataset(units))
    forked = len(plan.writers) > 1
    if forked:
        records_frame = records_frame.persist(StorageLevel.MEMORY_AND_DISK)
    folders = [attempt_folder(plan, mwu, attempt, branch) for branch in range(len(plan.writers))]
    outputs = [attempt_output_dir(str(config.branch(branch).writer_output_dir), plan.run_id, mwu.multi_work_unit_id,
                                  attempt) for branch in range(len(plan.writers))]
    try:
        staged_out = [write_branch(plan, mwu, folders[branch], outputs[branch], records_frame, branch,
                                   counting is Counting.FILES) for branch in range(len(plan.writers))]
        moved = [move_files(spark, config.properties, files) for files in staged_out]  # every branch written
        records, last_offsets = read_counts(units, counting, read, moved, counts is ReadCount.OFFSETS)
        written = records if wrote is None else counted(wrote, units)
        judge_units(config, units, records, written, staged.rejected_counts(len(units)), [*folders, *outputs])
        results = merge_branches([unit_results(units, records, last_offsets, files, branch, written=written,
                                               folder=outputs[branch]) for branch, files in enumerate(moved)])
        diverted = write_diverted(config.row_err_file, plan.run_id, mwu.multi_work_unit_id, units, staged.diverted)
    finally:
        if forked:
            records_frame.unpersist()
        staged.release()
    if staged.flagged or diverted:
        log.info("task %s attempt %d: %d record(s) failed an OPTIONAL row policy, %d diverted to the error file",
                 mwu.multi_work_unit_id, attempt, staged.flagged_count(), diverted)
    return results


def attempt_folder(plan: TaskPlan, mwu: MultiWorkUnit, attempt: int, branch: int) -> str:
    """A branch's fresh attempt folder, under the branch's writer.staging.dir."""
    staging = plan.config.branch(branch).writer_staging_dir
    return urls.join(str(staging), plan.run_id, path_segment(mwu.multi_work_unit_id), f"attempt-{attempt}")


def write_branch(plan: TaskPlan, mwu: MultiWorkUnit, folder: str, output: str, frame: DataFrame, index: int,
                 count_files: bool = False) -> list[StagedFile]:
    """One branch's write into its attempt folder, and where each of its files goes in the attempt's own task-output
    folder of the branch (`output`: the record engine's folders and names); each file's work unit named by its first
    record (the plan's key), else by its folder; `count_files`: every file's records counted as it moves (a
    time-partitioned job's always are: a work unit has a file per partition)."""
    config, settings, key = plan.config, plan.writers[index], plan.key
    write_attempt(frame, settings, folder, hadoop_options(config.properties, folder), unit_folders=key is None)
    counted = settings.output_format if settings.partitioned or count_files else None
    fs = FileSystems.of(config.properties)
    if key is not None:
        return keyed_files(fs, folder, mwu.work_units, output, key, settings.output_format, counted)
    return staged_files(fs, folder, mwu.work_units, output, counted)


def file_key(config: JobConfig, writers: Sequence[WriterSettings]) -> UnitKey | None:
    """The source's UnitKey when every branch's files may be named by their first record (no work unit folders,
    no sort): the records are written as read, with no time partition, in a format whose first record is read."""
    key = frame_reader(config).unit_key()
    if key is None or not stages.keeps_records(config):
        return None
    if any(w.partitioned or w.output_format not in KEYED_FORMATS for w in writers):
        return None
    return key


def merge_branches(per_branch: Sequence[tuple[WorkUnitResult, ...]]) -> tuple[WorkUnitResult, ...]:
    """One result per work unit holding every branch's file, counted as the record engine counts a forked unit."""
    if len(per_branch) == 1:
        return per_branch[0]
    merged = []
    for results in zip(*per_branch):
        files = tuple(f for r in results for f in r.output_files)
        merged.append(results[0].model_copy(update={
            "output_files": files, "records_written": sum(f.records for f in files),
            "bytes_written": sum(f.size for f in files)}))
    return tuple(merged)


def writer_schema(config: JobConfig, units: Sequence[WorkUnitSpec] = ()) -> str | None:
    """The Avro schema (JSON) the writers get: the record converters' output when the job has some, else the
    source's records' (None: Spark derives it from the columns)."""
    if config.converter_classes:
        return json.dumps(converted_schema(config))
    return frame_reader(config).record_schema(units)


class Counting(StrEnum):
    """How an attempt learns each work unit's records read."""

    PLANNED = "planned"
    """One record per offset, as planned (the synthetic source)."""
    FILES = "files"
    """Its files' records, counted from their Avro block headers or Parquet or ORC footers as they move: the job
    writes every record it reads."""
    OBSERVED = "observed"
    """Observed by Spark while it writes (`DataFrame.observe`): an aggregate per work unit evaluated on every row,
    0.6 of the 2.6 CPU s Spark's task threads spend on 1M Kafka records (docs/benchmarks.md)."""


COUNTED_FORMATS = frozenset({WriterOutputFormat.AVRO, WriterOutputFormat.PARQUET, WriterOutputFormat.ORC})
"""Formats whose files say how many records they hold without being decoded."""


def read_counting(config: JobConfig, writers: Sequence[WriterSettings]) -> Counting:
    """How the job's attempts count the records read: the plan's for a reader whose records are its offsets, else
    from the files when no stage drops a record and every branch's files carry their counts, else observed."""
    if frame_reader(config).READ_COUNT is ReadCount.PLANNED:
        return Counting.PLANNED
    if not stages.drops_records(config) and all(w.output_format in COUNTED_FORMATS for w in writers):
        return Counting.FILES
    return Counting.OBSERVED


def read_counts(units: Sequence[WorkUnitSpec], counting: Counting, read: Observation | None,
                moved: Sequence[Sequence[MovedFile]], offsets: bool) -> tuple[list[int], list[int | None]]:
    """Each work unit's records read and last offset (None: not known; the range's end stands): the plan's, its
    files' (`offsets`: each record takes one of its range's), or what Spark observed (Kafka: transaction markers and
    aborted records take offsets)."""
    if counting is Counting.FILES:
        return file_counts(units, moved, offsets), [None] * len(units)
    if read is not None:
        return observed(read, units)
    records = [u.expected_high_watermark - u.low_watermark for u in units]
    return records, [u.expected_high_watermark - 1 if n else None for u, n in zip(units, records)]


def judge_units(config: JobConfig, units: Sequence[WorkUnitSpec], read: list[int], written: list[int],
                rejected: list[int], folders: Sequence[str]) -> None:
    """Every branch's task-level policies on each work unit's counts (engines.policies, as on the records engine; a
    branch here takes every record, so each sees the same counts); a MANDATORY failure drops the attempt's output."""
    branches = [(b.index, [make_construct(config, TASK_POLICIES_KEY, p.class_path, TaskLevelPolicy, p.type, b.index)
                           for p in b.task_policies]) for b in config.branches]
    try:
        for index, unit in enumerate(units):
            for branch, policies in branches:
                check_task(policies, TaskStats(unit, branch, read[index], written[index], rejected[index], ()))
    except TaskQualityError:
        fs = FileSystems.of(config.properties)
        for folder in folders:
            fs.remove_tree(folder)
        raise


def check_stages(spark: SparkSession, config: JobConfig, mwus: Sequence[MultiWorkUnit]) -> None:
    """The job's SQL stages analysed over the source's columns, and its partition columns looked up in the columns
    written, before any task starts (a ConfigError naming the key: Spark analyses without reading a record)."""
    units = [u for mwu in mwus for u in mwu.work_units if u.expected_high_watermark > u.low_watermark][:1]
    partitioning = partitioning_of(config.properties)
    needed = stages.has_stages(config) or partitioning is not None
    frame = read_units(spark, config, units, 1) if units and needed else None
    if frame is not None:
        staged = stages.transform(config, frame, Attempt("planning", "planning", 1, tuple(units)))
        try:
            if partitioning is not None:  # the partition columns, against the columns written
                with_partition(staged.written, partitioning, F.lit(""), one_dataset(units))
        finally:
            staged.release()


def one_dataset(units: Sequence[WorkUnitSpec]) -> str:
    """The dataset of the work units, for an error, when they are of one ("" when of several)."""
    datasets = {u.dataset_urn for u in units}
    return datasets.pop() if len(datasets) == 1 else ""
