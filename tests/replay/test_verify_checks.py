"""`oncelog verify` cross-checks each watermark move and state commit against the step that planned it, the planned
ranges against the committed watermarks, and that one key never holds two payloads; each violation names its offset."""

from __future__ import annotations

from pathlib import Path

import pytest

import oncelog
from events.codec import Record
from events.commit import (
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    DatasetStateStep,
    HighWatermarkStep,
)
from events.dataset import DatasetStateCommitted, WatermarkAdvanced
from events.job import JobRunCommitted, JobRunStarted
from events.keys import partition_for
from events.log import EventLog, open_log
from events.model import Event, SequenceFields
from replay.verify import Violation, verify
from tests.factories import at

PARTITION = "MyTopic:0"


def sequence(sequence_id: str) -> SequenceFields:
    return {"job": "MyJob", "run_id": sequence_id, "dataset_urn": "MyTopic", "sequence_id": sequence_id}


def published(sequence_id: str, low: int, value: int, t: float, moved_to: int | None = None,
              records: int | None = None) -> list[Event]:
    """A sequence planning [low, value) of one partition and applying it; `moved_to` and `records` forge what the
    WatermarkAdvanced and the DatasetStateCommitted say (the plan stays right)."""
    fields = sequence(sequence_id)
    count = value - low
    steps = (HighWatermarkStep(partition=PARTITION, low_watermark=low, value=value),
             DatasetStateStep(watermarks={PARTITION: value}, records_published=count, files_published=1))
    moved = value if moved_to is None else moved_to
    return [
        CommitSequencePlanned(**fields, steps=steps, emitted_at=at(t)),
        WatermarkAdvanced(**fields, partition=PARTITION, low_watermark=low, value=moved, emitted_at=at(t + 1)),
        CommitStepApplied(**fields, step_index=0, outcome="executed", emitted_at=at(t + 2)),
        DatasetStateCommitted(**fields, watermarks={PARTITION: moved}, files_published=1,
                              records_published=count if records is None else records, emitted_at=at(t + 3)),
        CommitStepApplied(**fields, step_index=1, outcome="executed", emitted_at=at(t + 4)),
        CommitSequenceCompleted(**fields, emitted_at=at(t + 5)),
    ]


def where(log: EventLog, event_type: type[Event], sequence_id: str) -> str:
    """topic[partition]@offset of the first event of this type of a sequence, as the log holds it."""
    found = next(logged for logged in log.read() if type(logged.event) is event_type
                 and getattr(logged.event, "sequence_id", None) == sequence_id)
    return f"{found.topic}[{found.partition}]@{found.offset}"


def of_kind(violations: list[Violation], kind: str) -> list[Violation]:
    return [v for v in violations if v.kind == kind]


@pytest.fixture
def sqlite_log(tmp_path: Path) -> EventLog:
    log = open_log(f"sqlite:///{tmp_path / 'events.db'}?partitions=3")
    log.ensure_topic()
    return log


@pytest.mark.kafka
def test_a_watermark_move_that_differs_from_its_plan_is_named_by_offset(event_log: EventLog) -> None:
    """Issue 8, case 6: a WatermarkAdvanced says 18192 where its plan says 10000; verify names it, by offset."""
    event_log.append(published("run-1", 0, 10000, t=0, moved_to=18192))
    event_log.append(published("run-2", 10000, 20000, t=10, records=5))

    report = verify(event_log)

    assert not report.ok
    [moved] = of_kind(report.violations, "watermark-differs-from-plan")
    assert moved.position == where(event_log, WatermarkAdvanced, "run-1")
    assert "commit/MyJob/MyTopic/run-1/watermark/MyTopic:0" in moved.message and "'run-1'" in moved.message
    assert "to 18192" in moved.message and "planned 0 to 10000" in moved.message
    states = of_kind(report.violations, "state-differs-from-plan")
    assert {v.position for v in states} == {where(event_log, DatasetStateCommitted, s) for s in ("run-1", "run-2")}
    assert any("5 records" in v.message and "10000 records" in v.message for v in states)
    [twice] = of_kind(report.violations, "published-twice")  # run-2 starts at 10000, the forged move ended at 18192
    assert twice.position == where(event_log, WatermarkAdvanced, "run-2")


def test_a_clean_history_passes_and_the_plans_are_checked_against_the_committed_watermark(sqlite_log: EventLog) -> None:
    sqlite_log.append([*published("run-1", 0, 100, t=0), *published("run-2", 100, 200, t=10)])
    assert verify(sqlite_log).ok

    gap = published("run-3", 250, 300, t=20)  # [200, 250) never extracted
    unplanned = published("run-4", 300, 400, t=30)
    unplanned[1] = unplanned[1].model_copy(update={"partition": "MyTopic:9"})  # a move no step planned
    silent = [e for e in published("run-5", 400, 500, t=40) if not isinstance(e, WatermarkAdvanced)]
    stale = published("run-6", 100, 150, t=50)[:1]  # pending, planned from where the watermark stood long ago
    sqlite_log.append([*gap, *unplanned, *silent, *stale])

    report = verify(sqlite_log)

    [skipped] = of_kind(report.violations, "range-skipped")
    assert skipped.position == where(sqlite_log, WatermarkAdvanced, "run-3") and "[200, 250)" in skipped.message
    [forged] = of_kind(report.violations, "watermark-unplanned")
    assert forged.position == where(sqlite_log, WatermarkAdvanced, "run-4") and "MyTopic:9" in forged.message
    never = of_kind(report.violations, "watermark-not-advanced")  # run-4 moved another partition than planned
    assert {v.position for v in never} == {where(sqlite_log, CommitSequencePlanned, s) for s in ("run-4", "run-5")}
    assert any("400 to 500" in v.message for v in never)
    [behind] = of_kind(report.violations, "stale-plan")
    assert behind.position == where(sqlite_log, CommitSequencePlanned, "run-6")
    # run-5 committed 500 without a WatermarkAdvanced: the state (what `state` shows and runs plan from) holds 500,
    # and verify measures the stale plan against that same fold
    assert oncelog.rebuild(sqlite_log).dataset_states("MyJob")["MyTopic"].watermarks[PARTITION] == 500
    assert "stands at 500" in behind.message and "publish twice [100, 500)" in behind.message
    assert report.pending == ["MyJob / MyTopic / run-6"]


def test_a_run_recorded_committed_while_a_sequence_it_planned_is_unsettled_is_named(sqlite_log: EventLog) -> None:
    """A run is committed once every sequence it planned has completed: its JobRunCommitted beside a sequence still
    pending (a step that failed) says otherwise of a dataset that is not published."""
    run_1 = [JobRunStarted(job="MyJob", run_id="run-1", emitted_at=at(0)), *published("run-1", 0, 100, t=1),
             JobRunCommitted(job="MyJob", run_id="run-1", datasets_committed=("MyTopic",), emitted_at=at(10))]
    sqlite_log.append(run_1)
    assert verify(sqlite_log).ok

    sqlite_log.append([JobRunStarted(job="MyJob", run_id="run-2", emitted_at=at(20)),
                       published("run-2", 100, 200, t=21)[0],  # planned, never applied
                       JobRunCommitted(job="MyJob", run_id="run-2", datasets_committed=("MyTopic",),
                                       emitted_at=at(30))])
    report = verify(sqlite_log)

    [unsettled] = of_kind(report.violations, "committed-run-unsettled")
    assert unsettled.position == where(sqlite_log, CommitSequencePlanned, "run-2")
    assert "run 'run-2' of job 'MyJob' is recorded committed" in unsettled.message
    assert "sequence 'run-2' of 'MyTopic' (MyJob), which it planned, is pending" in unsettled.message


def test_one_key_never_holds_two_payloads(sqlite_log: EventLog) -> None:
    first = published("run-1", 0, 100, t=0)
    sqlite_log.append(first)
    again = [e.model_copy(update={"emitted_at": at(99)}) for e in first]  # a re-emission after a crash: the same
    sqlite_log.append(again)
    assert verify(sqlite_log).ok

    applied = first[2]
    assert isinstance(applied, CommitStepApplied)
    sqlite_log.append([applied.model_copy(update={"outcome": "verified"})])  # same key, another payload
    other = WatermarkAdvanced(**sequence("run-1"), partition="MyTopic:1", low_watermark=0, value=5)
    codec, key = sqlite_log.codec, b"commit/MyJob/MyTopic/run-1/watermark/MyTopic:7"
    with sqlite_log.writer("vandal") as writer:  # a record filed under a key that is not its event's
        writer.append_records([Record(partition_for("MyTopic", 3), key, codec.encode_value(other, key), 0)])

    report = verify(sqlite_log)

    logged = list(sqlite_log.read())
    [reused] = of_kind(report.violations, "key-reused")
    assert reused.position == f"{logged[-2].topic}[{logged[-2].partition}]@{logged[-2].offset}"
    assert applied.key in reused.message and where(sqlite_log, CommitStepApplied, "run-1") in reused.message
    assert '"outcome":"executed"' in reused.message and '"outcome":"verified"' in reused.message
    [mismatch] = of_kind(report.violations, "key-mismatch")
    assert mismatch.position == f"{logged[-1].topic}[{logged[-1].partition}]@{logged[-1].offset}"
    assert "MyTopic:7" in mismatch.message and other.key in mismatch.message


def test_a_completion_counts_the_steps_of_its_plan(sqlite_log: EventLog) -> None:
    """Since CommitSequenceCompleted v2 the executed steps have no CommitStepApplied each: the completion's count
    stands for them, and a count short of the plan is a sequence completed early."""
    whole = [e for e in published("run-1", 0, 100, t=0) if not isinstance(e, CommitStepApplied)]
    whole[-1] = CommitSequenceCompleted(**sequence("run-1"), steps_applied=2, executed=2, emitted_at=at(5))
    sqlite_log.append(whole)
    assert verify(sqlite_log).ok

    short = [e for e in published("run-2", 100, 200, t=10) if not isinstance(e, CommitStepApplied)]
    short[-1] = CommitSequenceCompleted(**sequence("run-2"), steps_applied=1, executed=1, emitted_at=at(15))
    sqlite_log.append(short)
    [early] = of_kind(verify(sqlite_log).violations, "completed-early")
    assert early.position == where(sqlite_log, CommitSequenceCompleted, "run-2")
    assert "1 steps applied of the 2 planned" in early.message


def test_a_sequence_whose_end_is_gone_is_named_once_a_later_sequence_of_its_dataset_was_planned(
        sqlite_log: EventLog) -> None:
    """On Kafka, offsets have gaps by design (compaction): a completion that is gone is known by what followed it."""
    first = [e for e in published("run-1", 0, 100, t=0) if not isinstance(e, CommitSequenceCompleted)]
    sqlite_log.append([*first, *published("run-2", 100, 200, t=10)])

    [lost] = of_kind(verify(sqlite_log).violations, "sequence-end-missing")

    assert lost.position == where(sqlite_log, CommitSequencePlanned, "run-1")
    assert "'run-1'" in lost.message and "'run-2'" in lost.message
    sqlite_log.append(published("run-3", 200, 300, t=20)[:1])  # the last sequence pending: nothing is missing
    assert len(of_kind(verify(sqlite_log).violations, "sequence-end-missing")) == 1
