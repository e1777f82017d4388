"""Synthetic histories of the publish protocol: valid event streams of jobs, runs, tasks and commit sequences.

For property tests (any history folds the same way) and benchmarks (a million-event log). Deterministic for a
given random generator: runs with task failures and retries, failed runs, commit steps that fail and are retried,
sequences left pending by a crash and finished by the next run's recovery.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from events.commit import (
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepFailed,
    CommitStepSpec,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
)
from events.dataset import DatasetStateCommitted, WatermarkAdvanced
from events.job import (
    JobLockAcquired,
    JobLockReleased,
    JobRunCommitted,
    JobRunFailed,
    JobRunStarted,
    JobRunSucceeded,
    WorkUnitSpec,
    WorkUnitsPlanned,
)
from events.model import Event, RunFields, SequenceFields, TaskFields
from events.published import published_events
from events.task import (
    OutputFile,
    TaskFailed,
    TaskRetried,
    TaskStarted,
    TaskSucceeded,
    WorkUnitResult,
)

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class HistoryShape:
    """How big a history is and how often things go wrong in it."""

    jobs: int = 1
    runs: int = 3
    datasets: int = 3
    partitions: int = 2
    task_failure: float = 0.2
    run_failure: float = 0.1
    step_failure: float = 0.05
    crash: float = 0.1
    plans_together: bool = False
    """Every dataset's plan first, then each completion with its DatasetPublished (a launcher's order), rather than
    each dataset's plan and completion in turn."""


class _Clock:
    def __init__(self) -> None:
        self.micros = 0

    def tick(self) -> datetime:
        self.micros += 1000
        return EPOCH + timedelta(microseconds=self.micros)


def synthetic_history(rng: random.Random, shape: HistoryShape) -> list[Event]:
    """A valid history: every job runs `shape.runs` times over its datasets."""
    return list(iter_history(rng, shape))


def iter_history(rng: random.Random, shape: HistoryShape) -> Iterator[Event]:
    """The events of synthetic_history, generated lazily (a million events need not sit in memory)."""
    clock = _Clock()
    watermarks = {(j, d, p): 0
                  for j in range(shape.jobs) for d in range(shape.datasets) for p in range(shape.partitions)}
    leftovers: dict[int, list[Event]] = {}
    for run in range(shape.runs):
        for j in range(shape.jobs):
            yield from _run(rng, shape, clock, watermarks, leftovers, j, run)


def _run(rng: random.Random, shape: HistoryShape, clock: _Clock, watermarks: dict[tuple[int, int, int], int],
         leftovers: dict[int, list[Event]], j: int, run: int) -> Iterator[Event]:
    job, run_id = f"job-{j}", f"run-{run:05d}"
    common: RunFields = {"job": job, "run_id": run_id}
    yield JobLockAcquired(**common, holder="host:1", emitted_at=clock.tick())
    yield JobRunStarted(**common, properties={"job.name": job}, emitted_at=clock.tick())
    for event in leftovers.pop(j, []):  # recovery of the previous run's unfinished sequences
        yield event.model_copy(update={"emitted_at": clock.tick()})
    units = [
        WorkUnitSpec(work_unit_id=f"wu-{d}-{p}", dataset_urn=f"ds-{d}", partition=f"ds-{d}:{p}",
                     low_watermark=watermarks[(j, d, p)],
                     expected_high_watermark=watermarks[(j, d, p)] + rng.randint(1, 50))
        for d in range(shape.datasets) for p in range(shape.partitions)
    ]
    yield WorkUnitsPlanned(**common, work_units=tuple(units), emitted_at=clock.tick())
    results: list[WorkUnitResult] = []
    failed_tasks: list[str] = []
    for unit in units:
        task: TaskFields = {**common, "task_id": f"task-{unit.work_unit_id}"}
        result = WorkUnitResult(
            work_unit_id=unit.work_unit_id, dataset_urn=unit.dataset_urn, partition=unit.partition,
            low_watermark=unit.low_watermark, expected_high_watermark=unit.expected_high_watermark,
            actual_high_watermark=unit.expected_high_watermark,
            records_written=unit.expected_high_watermark - unit.low_watermark,
            output_files=(
                OutputFile(path=f"/out/{job}/{run_id}/{unit.work_unit_id}.avro", size=100, checksum="c" * 64),
            ),
        )
        attempt = 1
        while True:
            yield TaskStarted(**task, attempt=attempt, work_unit_ids=(unit.work_unit_id,), emitted_at=clock.tick())
            if rng.random() >= shape.task_failure:
                yield TaskSucceeded(**task, attempt=attempt, results=(result,), emitted_at=clock.tick())
                results.append(result)
                break
            yield TaskFailed(**task, attempt=attempt, error="synthetic failure", emitted_at=clock.tick())
            if attempt == 2:
                failed_tasks.append(task["task_id"])
                break
            yield TaskRetried(**task, attempt=attempt, next_attempt=attempt + 1, emitted_at=clock.tick())
            attempt += 1
    if failed_tasks or rng.random() < shape.run_failure:
        yield JobRunFailed(**common, error="tasks failed", failed_tasks=tuple(failed_tasks), emitted_at=clock.tick())
        yield JobLockReleased(**common, emitted_at=clock.tick())
        return
    yield JobRunSucceeded(**common, tasks=len(units), emitted_at=clock.tick())
    committed: list[str] = []
    plans: list[tuple[SequenceFields, list[CommitStepSpec]]] = []
    for d in range(shape.datasets):
        urn = f"ds-{d}"
        mine = [r for r in results if r.dataset_urn == urn]
        for r in mine:
            watermarks[(j, d, int(r.partition.rsplit(":", 1)[1]))] = r.actual_high_watermark
        plans.append(({**common, "dataset_urn": urn, "sequence_id": run_id}, _publish_steps(mine)))
    if shape.plans_together:  # as a launcher appends them: every plan, then each sequence's completion
        for sequence, steps in plans:
            yield CommitSequencePlanned(**sequence, steps=tuple(steps), emitted_at=clock.tick())
    for sequence, steps in plans:
        urn = sequence["dataset_urn"]
        if not shape.plans_together:
            yield CommitSequencePlanned(**sequence, steps=tuple(steps), emitted_at=clock.tick())
        applying = list(_apply(rng, shape, clock, sequence, steps))
        if rng.random() < shape.crash:
            cut = rng.randint(0, len(applying))
            yield from applying[:cut]
            leftovers.setdefault(j, []).extend(applying[cut:])
        else:
            yield from applying
            committed.append(urn)
    yield JobRunCommitted(**common, datasets_committed=tuple(committed), emitted_at=clock.tick())
    yield JobLockReleased(**common, emitted_at=clock.tick())


def _publish_steps(results: list[WorkUnitResult]) -> list[CommitStepSpec]:
    """A dataset's commit steps, as the publisher plans them: its files' renames, its watermarks, its state."""
    steps: list[CommitStepSpec] = [
        FsRenameStep(src=f.path, dst=f.path.replace("/out/", "/published/"), size=f.size, checksum=f.checksum)
        for r in results for f in r.output_files
    ]
    steps += [HighWatermarkStep(partition=r.partition, low_watermark=r.low_watermark, value=r.actual_high_watermark)
              for r in results]
    marks = {r.partition: r.actual_high_watermark for r in results}
    steps.append(DatasetStateStep(watermarks=marks, records_published=sum(r.records_written for r in results),
                                  files_published=len(results)))
    return steps


def _apply(rng: random.Random, shape: HistoryShape, clock: _Clock, sequence: SequenceFields,
           steps: list[CommitStepSpec]) -> Iterator[Event]:
    """The events of applying a sequence's steps, with a failed-then-retried step now and then: a failed attempt
    records the steps it applied before failing; the completing attempt's steps are counted by the completion."""
    failures, recorded = 0, 0
    for index, step in enumerate(steps):
        while failures < 2 and rng.random() < shape.step_failure:
            failures += 1
            for done in range(recorded, index):
                yield CommitStepApplied(**sequence, step_index=done, outcome="executed", emitted_at=clock.tick())
            recorded = index
            yield CommitStepFailed(**sequence, step_index=index, attempt=failures, error=f"transient #{failures}",
                                   emitted_at=clock.tick())
        if isinstance(step, HighWatermarkStep):
            yield WatermarkAdvanced(**sequence, partition=step.partition, low_watermark=step.low_watermark,
                                    value=step.value, emitted_at=clock.tick())
        elif isinstance(step, DatasetStateStep):
            yield DatasetStateCommitted(**sequence, watermarks=step.watermarks,
                                        records_published=step.records_published,
                                        files_published=step.files_published, emitted_at=clock.tick())
    yield CommitSequenceCompleted(**sequence, steps_applied=len(steps), executed=len(steps) - recorded,
                                  emitted_at=clock.tick())
    if shape.plans_together:
        yield from (p.model_copy(update={"emitted_at": clock.tick()}) for p in published_events(sequence, steps))
