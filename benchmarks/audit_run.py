"""A synthetic run's events for the audit benchmarks (and the audit tests that check the same run): a wide committed
run of many datasets, each with its commit sequence, built without Spark."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from events.commit import (
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepFailed,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
)
from events.dataset import DatasetStateCommitted, WatermarkAdvanced
from events.job import (
    JobLockAcquired,
    JobLockReleased,
    JobRunCommitted,
    JobRunStarted,
    JobRunSucceeded,
    WorkUnitSpec,
    WorkUnitsPlanned,
)
from events.model import Event, RunFields, SequenceFields, TaskFields
from events.task import OutputFile, TaskFailed, TaskRetried, TaskStarted, TaskSucceeded, WorkUnitResult

T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
APP_ID = "app-20261121120000-0042"
TRACEBACK = ('Traceback (most recent call last):\n  File "/opt/job/extract.py", line 12, in read\n'
             '    raise ConnectionError("broker went away")\nConnectionError: broker went away')


def at(seconds: float) -> datetime:
    """The instant `seconds` after the run's T0."""
    return T0 + timedelta(seconds=seconds)


def dataset_commit(run: RunFields, urn: str, begin: float, end: float, records: int, size: int,
                   failures: int = 0, with_state_events: bool = True) -> list[Event]:
    """The events that plan and apply one dataset's sequence (rename, watermark, state) between begin and end;
    without the dataset-state events the report does not draw (WatermarkAdvanced, DatasetStateCommitted) if asked."""
    sequence: SequenceFields = {**run, "dataset_urn": urn, "sequence_id": run["run_id"]}
    output = f"/data/task-output/{run['run_id']}/{urn}/part-0.avro"
    steps = (FsRenameStep(src=output, dst=output.replace("task-output", "final"), size=size, checksum="c" * 64),
             HighWatermarkStep(partition=f"{urn}:0", low_watermark=0, value=records),
             DatasetStateStep(watermarks={f"{urn}:0": records}, records_published=records, files_published=1))
    tick = (end - begin) / 5
    events: list[Event] = [CommitSequencePlanned(**sequence, steps=steps, emitted_at=at(begin))]
    events += [CommitStepFailed(**sequence, step_index=0, attempt=n + 1, error=f"timeout #{n + 1}",
                                emitted_at=at(begin + tick / 2)) for n in range(failures)]
    events.append(CommitStepApplied(**sequence, step_index=0, outcome="executed", duration_ms=tick * 1000,
                                    emitted_at=at(begin + tick)))
    if with_state_events:
        events.append(WatermarkAdvanced(**sequence, partition=f"{urn}:0", low_watermark=0, value=records,
                                        emitted_at=at(begin + 2 * tick)))
    events.append(CommitStepApplied(**sequence, step_index=1, outcome="executed", duration_ms=tick * 1000,
                                    emitted_at=at(begin + 2 * tick)))
    if with_state_events:
        events.append(DatasetStateCommitted(**sequence, watermarks={f"{urn}:0": records}, records_published=records,
                                            files_published=1, emitted_at=at(begin + 3 * tick)))
    events += [CommitStepApplied(**sequence, step_index=2, outcome="verified", duration_ms=tick * 1000,
                                 emitted_at=at(begin + 3 * tick)),
               CommitSequenceCompleted(**sequence, duration_ms=(end - begin) * 1000, emitted_at=at(end))]
    return events


def result(run: RunFields, unit: WorkUnitSpec, records: int, size: int) -> WorkUnitResult:
    output = f"/data/task-output/{run['run_id']}/{unit.dataset_urn}/part-0.avro"
    return WorkUnitResult(work_unit_id=unit.work_unit_id, dataset_urn=unit.dataset_urn, partition=unit.partition,
                          low_watermark=0, expected_high_watermark=records, actual_high_watermark=records,
                          records_extracted=records, records_written=records, bytes_written=size,
                          output_files=(OutputFile(path=output, size=size, checksum="c" * 64, records=records),))


def large_run(run_id: str, datasets: int, tasks: int, slots: int = 16) -> Iterator[list[Event]]:
    """A committed run of `datasets` datasets (a work unit each) in `tasks` tasks on `slots` slots, as batches of
    events in log order: 1 s of lock and planning, tasks in waves of 0.5 s, then a 12 s commit."""
    run: RunFields = {"job": "wide", "run_id": run_id}
    units = [WorkUnitSpec(work_unit_id=f"wu-{i:05d}", dataset_urn=f"kafka.events.topic-{i:05d}",
                          partition=f"kafka.events.topic-{i:05d}:0", low_watermark=0, expected_high_watermark=100 + i,
                          multi_work_unit_id=f"mwu-{i % tasks}") for i in range(datasets)]
    yield [JobLockAcquired(**run, holder="driver-host:4242", emitted_at=at(0)),
           JobRunStarted(**run, properties={"job.name": "wide", "spark.app.id": APP_ID}, emitted_at=at(0)),
           WorkUnitsPlanned(**run, work_units=tuple(units), emitted_at=at(0.9))]
    batch: list[Event] = []
    for t in range(tasks):
        mine = units[t::tasks]
        begin = 1.0 + (t // slots) * 0.5
        task: TaskFields = {**run, "task_id": f"task-{t:04d}"}
        ids = tuple(u.work_unit_id for u in mine)
        attempt = 1
        if t == 7:  # one task fails once, with a traceback, and is retried
            batch += [TaskStarted(**task, attempt=1, work_unit_ids=ids, executor="exec-7", emitted_at=at(begin)),
                      TaskFailed(**task, attempt=1, error=TRACEBACK, emitted_at=at(begin + 0.1)),
                      TaskRetried(**task, attempt=1, next_attempt=2, delay_s=0.1, emitted_at=at(begin + 0.1))]
            attempt, begin = 2, begin + 0.2
        results = tuple(result(run, u, u.expected_high_watermark, 4096) for u in mine)
        batch += [TaskStarted(**task, attempt=attempt, work_unit_ids=ids, executor=f"exec-{t % slots}",
                              emitted_at=at(begin)),
                  TaskSucceeded(**task, attempt=attempt, results=results, duration_ms=450,
                                emitted_at=at(begin + 0.45))]
    tasks_end = 1.0 + (tasks // slots + 1) * 0.5
    batch.append(JobRunSucceeded(**run, tasks=tasks, records_written=sum(u.expected_high_watermark for u in units),
                                 emitted_at=at(tasks_end)))
    yield batch
    commit_start = tasks_end + 0.1
    plans: list[Event] = []
    applied: list[Event] = []
    for i, unit in enumerate(units):
        begin = commit_start + 12 * i / datasets
        events = dataset_commit(run, unit.dataset_urn, begin, begin + 0.05, unit.expected_high_watermark, 4096,
                                failures=1 if i % 1000 == 0 else 0, with_state_events=False)
        plans.append(events[0])
        applied += events[1:]
    yield plans
    yield applied
    end = commit_start + 12.1
    yield [JobRunCommitted(**run, datasets_committed=tuple(u.dataset_urn for u in units), emitted_at=at(end)),
           JobLockReleased(**run, emitted_at=at(end + 0.3))]
