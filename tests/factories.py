"""Sample events of every type, for tests that need realistic transitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from events.batch import pack
from events.commit import (
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepFailed,
    CommitStepRolledBack,
    CommitStepSpec,
    CompletenessStep,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
    PartitionBounds,
)
from events.completeness import EventTimeAdvanced, PartitionCompleted
from events.dataset import DatasetReleased, DatasetStateCommitted, WatermarkAdvanced
from events.job import (
    DatasetSkipped,
    JobLockAcquired,
    JobLockReleased,
    JobRunCancelled,
    JobRunCommitted,
    JobRunFailed,
    JobRunStarted,
    JobRunSucceeded,
    WorkUnitSpec,
    WorkUnitsPlanned,
)
from events.model import Event, RunFields, SequenceFields
from events.published import DatasetPublished, PublishedFile, WatermarkRange, published_events
from events.task import (
    OutputFile,
    TaskFailed,
    TaskRetried,
    TaskStarted,
    TaskSucceeded,
    WorkUnitResult,
)

T0 = datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """A fixed instant, seconds after T0: tests stay deterministic."""
    return T0 + timedelta(seconds=seconds)


def sample_steps(urn: str = "MyTopic") -> tuple[CommitStepSpec, ...]:
    """One commit step of each kind a plan of `urn` holds, the first three those of a folder publisher."""
    return (
        FsRenameStep(src=f"task-output/{urn}/1.avro", dst=f"job-output/{urn}/1.avro", size=4096, checksum="ab" * 32),
        HighWatermarkStep(partition=f"{urn}:0", low_watermark=0, value=100),
        DatasetStateStep(watermarks={f"{urn}:0": 100}, records_published=100, files_published=1, properties={"a": "b"}),
        CompletenessStep(frontiers={f"{urn}:0": 7_200_000}, horizon_ms=7_200_000,
                         open_partitions={"1970/01/01/02": 10_800_000},
                         completes=(PartitionBounds(partition="1970/01/01/01", start_ms=3_600_000, end_ms=7_200_000,
                                                    markers=(f"job-output/{urn}/1970/01/01/01/_SUCCESS",)),),
                         late_records={"1970/01/01/00": 3}, late_files={"1970/01/01/00": 1}),
    )


def one_of_each(job: str = "MyJob", run_id: str = "run-1", urn: str = "MyTopic") -> list[Event]:
    """One event of every type a record holds alone (a batch: `batched`), with every kind of field filled in."""
    common: RunFields = {"job": job, "run_id": run_id}
    work_unit = WorkUnitSpec(
        work_unit_id="wu-0", dataset_urn=urn, partition=f"{urn}:0", low_watermark=0, expected_high_watermark=100,
        multi_work_unit_id="mwu-0", estimated_records=100, properties={"topic.name": urn},
    )
    result = WorkUnitResult(
        work_unit_id="wu-0", dataset_urn=urn, partition=f"{urn}:0", low_watermark=0, expected_high_watermark=100,
        actual_high_watermark=100, records_extracted=100, records_written=100, bytes_written=4096,
        output_files=(OutputFile(path=f"task-output/{urn}/1.avro", size=4096, checksum="ab" * 32, records=100),),
    )
    steps = sample_steps(urn)
    dataset: SequenceFields = {**common, "dataset_urn": urn, "sequence_id": run_id}
    earlier: SequenceFields = {**dataset, "sequence_id": "run-0"}
    return [
        JobLockAcquired(**common, holder="host:1234", emitted_at=at(0)),
        JobRunStarted(**common, job_group="g", properties={"job.name": job}, emitted_at=at(1)),
        WorkUnitsPlanned(**common, work_units=(work_unit,), emitted_at=at(2)),
        DatasetSkipped(**common, dataset_urn=f"{urn}.other", sequence_id="run-0", reason="pending", emitted_at=at(2.5)),
        TaskStarted(**common, task_id="task-0", attempt=1, work_unit_ids=("wu-0",), executor="exec-1",
                    emitted_at=at(3)),
        TaskFailed(**common, task_id="task-0", attempt=1, error="boom", results=(result,), duration_ms=5,
                   emitted_at=at(4)),
        TaskRetried(**common, task_id="task-0", attempt=1, next_attempt=2, delay_s=0.5, reason="boom",
                    emitted_at=at(5)),
        TaskSucceeded(**common, task_id="task-0", attempt=2, results=(result,), duration_ms=7, emitted_at=at(6)),
        JobRunSucceeded(**common, tasks=1, records_extracted=100, records_written=100, emitted_at=at(7)),
        CommitSequencePlanned(**dataset, steps=steps, emitted_at=at(8)),
        CommitStepFailed(**dataset, step_index=0, attempt=1, error="disk full", emitted_at=at(9)),
        CommitStepApplied(**dataset, step_index=0, outcome="executed", duration_ms=1.5, emitted_at=at(10)),
        WatermarkAdvanced(**dataset, partition=f"{urn}:0", low_watermark=0, value=100, emitted_at=at(11)),
        DatasetStateCommitted(**dataset, watermarks={f"{urn}:0": 100}, records_published=100, files_published=1,
                              emitted_at=at(12)),
        EventTimeAdvanced(**dataset, frontiers={f"{urn}:0": 7_200_000}, horizon_ms=7_200_000,
                          open_partitions={"1970/01/01/02": 10_800_000}, late_records={"1970/01/01/00": 3},
                          late_files={"1970/01/01/00": 1}, emitted_at=at(12.2)),
        PartitionCompleted(**dataset, partition="1970/01/01/01", start_ms=3_600_000, end_ms=7_200_000,
                           horizon_ms=7_200_000, markers=(f"job-output/{urn}/1970/01/01/01/_SUCCESS",),
                           emitted_at=at(12.4)),
        CommitSequenceCompleted(**dataset, duration_ms=3.0, emitted_at=at(13)),
        DatasetPublished(**dataset, files=(PublishedFile(path=f"job-output/{urn}/1.avro", size=4096, checksum="ab" * 32,
                                                         records=100),),
                         watermarks=(WatermarkRange(partition=f"{urn}:0", low_watermark=0, high_watermark=100),),
                         files_published=1, records_published=100, bytes_published=4096, emitted_at=at(13.5)),
        CommitSequenceAbandoned(**earlier, attempts=3, error="gone", emitted_at=at(14)),
        CommitStepRolledBack(**earlier, step_index=0, outcome="moved_back",
                             emitted_at=at(14.2)),
        DatasetReleased(**earlier, reason="operator", emitted_at=at(14.5)),
        JobRunCommitted(**common, datasets_committed=(urn,), datasets_skipped=(f"{urn}.other",), emitted_at=at(15)),
        JobRunFailed(job=job, run_id="run-0", error="x", failed_tasks=("task-9",), emitted_at=at(16)),
        JobRunCancelled(job=job, run_id="run-00", reason="SIGTERM", emitted_at=at(17)),
        JobLockReleased(**common, emitted_at=at(18)),
    ]


def batched(run: RunFields, urns: tuple[str, ...], steps: tuple[CommitStepSpec, ...], emitted_at: datetime
            ) -> list[Event]:
    """A CommitSequencesPlanned and a CommitSequencesCompleted: the plans and completions of `urns`' sequences."""
    plans: list[Event] = []
    ends: list[Event] = []
    for urn in urns:
        sequence: SequenceFields = {**run, "dataset_urn": urn, "sequence_id": run["run_id"]}
        plans.append(CommitSequencePlanned(**sequence, steps=steps, emitted_at=emitted_at))
        ends += [WatermarkAdvanced(**sequence, partition=f"{urn}:0", low_watermark=0, value=100, emitted_at=emitted_at),
                 DatasetStateCommitted(**sequence, watermarks={f"{urn}:0": 100}, records_published=100,
                                       files_published=1, emitted_at=emitted_at),
                 CommitStepApplied(**sequence, step_index=0, outcome="verified", duration_ms=0.5,
                                   emitted_at=emitted_at),
                 CommitSequenceCompleted(**sequence, duration_ms=3.0, steps_applied=len(steps), executed=2, verified=1,
                                         step_ms=(0.5, 1.0, 1.0), emitted_at=emitted_at),
                 *published_events(sequence, steps)]
    records = pack([*plans, *ends], partitions=1)
    assert len(records) == 2
    return records


def step_events(count: int, job: str = "bench", datasets: int = 10) -> list[Event]:
    """`count` small, distinct dataset-scoped transitions spread over `datasets` datasets."""
    return [
        CommitStepApplied(job=job, run_id="r1", dataset_urn=f"ds.{i % datasets}", sequence_id="r1", step_index=i,
                          outcome="executed", duration_ms=float(i % 7), emitted_at=at(i / 1000))
        for i in range(count)
    ]
