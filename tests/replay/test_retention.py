"""Retention (`oncelog gc`) never changes what was published: `state` and `verify` answer the same after it."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from events.codec import Record
from events.commit import (
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepFailed,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
)
from events.dataset import DatasetReleased, DatasetStateCommitted, WatermarkAdvanced
from events.job import (
    JobLockAcquired,
    JobLockReleased,
    JobRunCommitted,
    JobRunFailed,
    JobRunStarted,
    JobRunSucceeded,
)
from events.log import EventLog
from events.model import Event, RunEvent, RunFields, SequenceFields
from oncelog.cli import app
from projections.synthetic import HistoryShape, synthetic_history
from tests.factories import at
from tests.log_fixtures import LogFactory

runner = CliRunner()
SHAPE = HistoryShape(jobs=2, runs=5, datasets=2, partitions=2, task_failure=0.15, run_failure=0.1, step_failure=0.3,
                     crash=0.0)


def cli_json(log: EventLog, *args: str, expect: int = 0) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--json", "--log", log.url])
    assert result.exit_code == expect, result.stdout + result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def answers(log: EventLog, publish_dir: Path | None = None) -> dict[str, Any]:
    """What `state` and `verify` say of the datasets: watermarks, totals, last run, sequences, violations."""
    state = cli_json(log, "state")
    args = ("verify",) if publish_dir is None else ("verify", "--publish-dir", str(publish_dir))
    result = runner.invoke(app, [*args, "--json", "--log", log.url])
    checked = json.loads(result.stdout)
    return {
        "datasets": state["datasets"], "pending": state["pending_sequences"],
        "abandoned": state["abandoned_sequences"], "problems": state["problem_count"],
        "verify": {"ok": checked["ok"], "sequences": checked["sequences"], "pending": checked["pending"],
                   "published_files": checked["published_files"],
                   "violations": sorted(v["kind"] for v in checked["violations"])},
    }


def published_history(log: EventLog, base: Path) -> list[Event]:
    """A synthetic history of several runs whose renames publish under base/published: the files are there, of their
    recorded size."""
    events: list[Event] = []
    for event in synthetic_history(random.Random(4), SHAPE):
        if isinstance(event, CommitSequencePlanned):
            steps = tuple(s.model_copy(update={"dst": f"{base}{s.dst}"}) if isinstance(s, FsRenameStep) else s
                          for s in event.steps)
            event = event.model_copy(update={"steps": steps})
            for step in steps:
                if isinstance(step, FsRenameStep):
                    Path(step.dst).parent.mkdir(parents=True, exist_ok=True)
                    Path(step.dst).write_bytes(b"r" * step.size)
        events.append(event)
    log.append(events)
    return events


def compacted(log: EventLog, log_factory: LogFactory) -> EventLog:
    """The log as it reads once compaction has run: SQLite drops tombstoned records at once; for Kafka, a copy
    keeping each key's last record unless it is a tombstone (what the log cleaner leaves)."""
    if log.url.startswith("sqlite"):
        return log
    records = list(log.read_records())
    last = {r.key: i for i, r in enumerate(records)}
    copy = log_factory(partitions=log.partitions)
    with copy.writer("compactor") as writer:
        writer.append_records(Record(r.partition, r.key, r.value, r.timestamp_ms)
                              for i, r in enumerate(records) if last[r.key] == i and r.value is not None)
    return copy


def test_gc_keeps_every_published_fact_so_state_and_verify_answer_the_same(log_factory: LogFactory,
                                                                           tmp_path: Path) -> None:
    log = log_factory()
    events = published_history(log, tmp_path)
    publish_dir = tmp_path / "published"
    before = answers(log, publish_dir)
    assert before["verify"]["ok"] and before["verify"]["published_files"] > 10
    assert all(d["records_published"] > 0 for d in before["datasets"])

    report = cli_json(log, "gc", "--keep-runs", "1")

    assert len(report["runs_deleted"]) >= 6 and report["tombstones"] > 0
    after = compacted(log, log_factory)
    assert answers(after, publish_dir) == before
    left = [logged.event for logged in after.read()]
    kept_runs = {(e.job, e.run_id) for e in left if isinstance(e, RunEvent)}
    assert len(kept_runs) == SHAPE.jobs, "one run per job keeps its transitions"
    failed = [e for e in events if isinstance(e, CommitStepFailed) and (e.job, e.run_id) not in kept_runs]
    assert failed and not [e for e in left if isinstance(e, CommitStepFailed) and (e.job, e.run_id) not in kept_runs]


def finished_run(job: str, run_id: str, t: float, middle: Sequence[Event] = (), committed: bool = True
                 ) -> list[Event]:
    """A run's transitions around `middle`: lock, start, success, commit (or, with a sequence it leaves unsettled,
    failure), release."""
    common: RunFields = {"job": job, "run_id": run_id}
    end = (JobRunCommitted(**common, emitted_at=at(t + 8)) if committed
           else JobRunFailed(**common, error="a commit step failed", emitted_at=at(t + 8)))
    return [JobLockAcquired(**common, holder="host:1", emitted_at=at(t)),
            JobRunStarted(**common, emitted_at=at(t + 1)), JobRunSucceeded(**common, tasks=1, emitted_at=at(t + 2)),
            *middle, end, JobLockReleased(**common, emitted_at=at(t + 9))]


def applying(sequence: SequenceFields, partition: str, low: int, value: int, records: int, t: float) -> list[Event]:
    """A sequence's plan (one watermark step, its state) or, with t > 0, its steps applied and its completion."""
    steps = (HighWatermarkStep(partition=partition, low_watermark=low, value=value),
             DatasetStateStep(watermarks={partition: value}, records_published=records, files_published=1))
    return [
        CommitSequencePlanned(**sequence, steps=steps, emitted_at=at(t)),
        WatermarkAdvanced(**sequence, partition=partition, low_watermark=low, value=value, emitted_at=at(t + 1)),
        CommitStepApplied(**sequence, step_index=0, outcome="executed", emitted_at=at(t + 2)),
        DatasetStateCommitted(**sequence, watermarks={partition: value}, records_published=records, files_published=1,
                              emitted_at=at(t + 3)),
        CommitStepApplied(**sequence, step_index=1, outcome="executed", emitted_at=at(t + 4)),
        CommitSequenceCompleted(**sequence, emitted_at=at(t + 5)),
    ]


def test_gc_keeps_the_newest_watermark_when_an_older_sequence_completed_last(log_factory: LogFactory) -> None:
    """run-1 plans p0 and stops; run-2 publishes p1; run-3 finishes run-1's sequence: the dataset's last sequence is
    run-1's, while run-2's holds p1's watermark. Keeping only the last sequence would lose p1 and run-2's totals.
    run-4's sequence is still pending: run-4 stays whole although run-5 is newer."""
    log = log_factory()
    old: SequenceFields = {"job": "J", "run_id": "run-1", "dataset_urn": "ds", "sequence_id": "run-1"}
    newer: SequenceFields = {"job": "J", "run_id": "run-2", "dataset_urn": "ds", "sequence_id": "run-2"}
    pending: SequenceFields = {"job": "J", "run_id": "run-4", "dataset_urn": "ds", "sequence_id": "run-4"}
    first = applying(old, "ds:0", 0, 10, records=10, t=3)
    log.append([
        *finished_run("J", "run-1", 0, first[:1], committed=False),
        *finished_run("J", "run-2", 100, applying(newer, "ds:1", 0, 7, records=7, t=103)),
        *finished_run("J", "run-3", 200, first[1:]),
        *finished_run("J", "run-4", 300, applying(pending, "ds:0", 10, 20, records=10, t=303)[:3], committed=False),
        *finished_run("J", "run-5", 400),
    ])
    before = answers(log)
    assert before["verify"]["ok"] and before["datasets"][0]["last_sequence_id"] == "run-1"
    assert before["datasets"][0]["watermarks"] == {"ds:0": 20, "ds:1": 7}
    assert [s["sequence_id"] for s in before["pending"]] == ["run-4"]

    report = cli_json(log, "gc", "--keep-runs", "1")

    assert report["runs_deleted"] == ["J / run-1", "J / run-2", "J / run-3"]
    assert answers(compacted(log, log_factory)) == before


def partly_compacted(log: EventLog, log_factory: LogFactory, applied: int) -> EventLog:
    """A copy of the log as Kafka's cleaner may leave it mid-way: only the first `applied` tombstones (in offset
    order: the cleaner works on a prefix of the log) have removed their keys' earlier records; every tombstone
    stays (delete.retention.ms)."""
    records = list(log.read_records())
    tombstones = [i for i, r in enumerate(records) if r.value is None][:applied]
    removed = {records[i].key: i for i in tombstones}
    copy = log_factory(partitions=log.partitions, url=None)
    with copy.writer("compactor") as writer:
        writer.append_records(Record(r.partition, r.key, r.value, r.timestamp_ms) for i, r in enumerate(records)
                              if r.value is None or removed.get(r.key, -1) < i)
    return copy


def run_ids(log: EventLog) -> list[str]:
    """The runs `oncelog runs` lists (it exits 0: the fold met nothing it could not place)."""
    return [r["run_id"] for r in cli_json(log, "runs")["runs"]]


def test_gc_takes_effect_at_once_in_every_command_and_mid_compaction(log_factory: LogFactory) -> None:
    log = log_factory()
    log.append(synthetic_history(random.Random(4), SHAPE))
    before = run_ids(log)
    deleted = cli_json(log, "gc", "--keep-runs", "1")["runs_deleted"]
    assert len(deleted) >= 6

    gone = {entry.split(" / ")[1] for entry in deleted}
    left = run_ids(log)  # on Kafka the deleted records are still there, behind their tombstones
    assert left == [r for r in before if r not in gone] and len(left) == SHAPE.jobs
    again = cli_json(log, "gc", "--keep-runs", "1", "--dry-run")
    assert again["runs_deleted"] == [] and again["tombstones"] == 0, "gc and a later dry run must agree"
    audited = runner.invoke(app, ["audit", sorted(gone)[0], "--log", log.url])
    assert audited.exit_code == 2 and "no run" in audited.stderr, audited.stdout + audited.stderr
    assert cli_json(log, "verify")["ok"]
    tombstones = sum(1 for r in log.read_records() if r.value is None)
    for applied in (tombstones // 3, tombstones // 2, tombstones - 1):
        assert run_ids(partly_compacted(log, log_factory, applied)) == left, f"{applied} tombstones applied"


def test_a_run_whose_abandoned_sequence_is_released_can_be_collected(log_factory: LogFactory) -> None:
    log = log_factory()
    seq: SequenceFields = {"job": "J", "run_id": "run-1", "dataset_urn": "ds", "sequence_id": "run-1"}
    steps = (HighWatermarkStep(partition="ds:0", low_watermark=0, value=10),)
    log.append([
        *finished_run("J", "run-1", 0, [CommitSequencePlanned(**seq, steps=steps, emitted_at=at(3)),
                                        CommitStepFailed(**seq, step_index=0, attempt=1, error="x", emitted_at=at(4)),
                                        CommitSequenceAbandoned(**seq, attempts=1, error="x", emitted_at=at(5))]),
        *finished_run("J", "run-2", 100), *finished_run("J", "run-3", 200),
    ])
    assert cli_json(log, "gc", "--keep-runs", "1", "--dry-run")["runs_deleted"] == ["J / run-2"]
    log.append([DatasetReleased(**seq, reason="released with oncelog recover --release", emitted_at=at(300))])
    assert cli_json(log, "gc", "--keep-runs", "1")["runs_deleted"] == ["J / run-1", "J / run-2"]
    assert run_ids(log) == ["run-3"]
    assert cli_json(log, "state")["abandoned_sequences"], "the abandoned sequence itself stays in the history"
