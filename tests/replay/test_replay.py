"""The replay commands, end to end through the `oncelog` CLI, on both stores."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.codec import Record
from events.commit import (
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    HighWatermarkStep,
)
from events.dataset import WatermarkAdvanced
from events.job import JobRunCommitted
from events.keys import partition_for
from events.log import EventLog
from events.model import SequenceFields
from events.task import TaskStarted, TaskSucceeded
from oncelog.cli import app
from projections.projector import ProjectionStopped, Projector
from projections.state import State
from projections.synthetic import HistoryShape, synthetic_history
from tests.factories import at

runner = CliRunner()
SHAPE = HistoryShape(jobs=2, runs=5, datasets=3, partitions=2, task_failure=0.2, crash=0.0, run_failure=0.0)


def cli(log: EventLog, *args: str) -> tuple[int, str]:
    """Exit code and everything printed (stdout, then stderr)."""
    result = runner.invoke(app, [*args, "--log", log.url])
    return result.exit_code, result.stdout + result.stderr


def cli_json(log: EventLog, *args: str) -> dict:
    result = runner.invoke(app, [*args, "--json", "--log", log.url])
    assert result.exit_code == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def history(log: EventLog, seed: int = 7, shape: HistoryShape = SHAPE) -> list:
    events = synthetic_history(random.Random(seed), shape)
    log.append(events)
    return events


def fold(events: list) -> State:
    state = State()
    for event in events:
        state.apply_event(event)
    return state


def test_rebuild_then_state(event_log: EventLog) -> None:
    events = history(event_log)
    report = cli_json(event_log, "rebuild")
    assert report["events"] == len(events) and report["problems"] == 0 and not report["from_snapshot"]
    assert report["snapshot_bytes"] > 0
    document = cli_json(event_log, "state")
    expected = fold(events)
    assert {(d["job"], d["dataset_urn"]): d["watermarks"] for d in document["datasets"]} == {
        key: view.watermarks for key, view in expected.datasets.items()}
    assert document["pending_sequences"] == []
    one = cli_json(event_log, "state", "ds-1", "--job", "job-0")
    assert [(d["job"], d["dataset_urn"]) for d in one["datasets"]] == [("job-0", "ds-1")]
    code, output = cli(event_log, "state", "no-such-dataset")
    assert code == 2 and "no dataset 'no-such-dataset'" in output


def test_snapshot_plus_tail_equals_full_replay(event_log: EventLog) -> None:
    history(event_log, seed=1)
    cli_json(event_log, "rebuild")
    history(event_log, seed=2, shape=HistoryShape(jobs=1, runs=2, datasets=2))
    tail = cli_json(event_log, "rebuild", "--from-snapshot")
    assert tail["from_snapshot"] and 0 < tail["events"] < 300
    from_snapshot, _ = Projector(event_log).rebuild(use_snapshot=True)
    full, _ = Projector(event_log).rebuild(use_snapshot=False)
    assert from_snapshot == full


def test_replay_until_an_offset_or_a_time_is_the_state_then(event_log: EventLog) -> None:
    events = history(event_log)
    logged = list(event_log.read())
    middle = logged[len(logged) // 2]
    if event_log.url.startswith("sqlite"):  # offsets are global: N cuts every partition
        until = str(middle.offset)
        prefix = [i.event for i in logged if i.offset <= middle.offset]
    else:  # P:N cuts partition P at N; every partition needs one
        offsets = {p: [i.offset for i in logged if i.partition == p] for p in range(event_log.partitions)}
        cuts = {p: found[len(found) // 2] for p, found in offsets.items()}  # each partition at its middle record
        until = ",".join(f"{p}:{o}" for p, o in cuts.items())
        prefix = [i.event for i in logged if i.offset <= cuts[i.partition]]
    past = cli_json(event_log, "replay", "--until", until)
    expected = fold(prefix)
    assert {(d["job"], d["dataset_urn"]): d["watermarks"] for d in past["datasets"]} == {
        key: view.watermarks for key, view in expected.datasets.items()}
    moment = events[len(events) // 3].emitted_at
    by_time = cli_json(event_log, "replay", "--until", moment.isoformat())
    expected = fold([e for e in events if e.emitted_at <= moment])
    assert {(d["job"], d["dataset_urn"]): d["watermarks"] for d in by_time["datasets"]} == {
        key: view.watermarks for key, view in expected.datasets.items()}
    code, output = cli(event_log, "replay", "--until", "yesterday-ish")
    assert code == 2 and "neither an offset" in output


def test_audit_shows_the_run_as_a_timeline(event_log: EventLog, tmp_path: Path) -> None:
    events = history(event_log, shape=HistoryShape(jobs=1, runs=4, datasets=2, partitions=1, task_failure=0.4,
                                                   crash=0.0, run_failure=0.0))
    committed = {e.run_id for e in events if isinstance(e, JobRunCommitted)}
    retried = next(e for e in events if isinstance(e, TaskSucceeded) and e.attempt == 2 and e.run_id in committed)
    report = cli_json(event_log, "audit", retried.run_id, "--html", str(tmp_path / "audit.html"))
    assert report["run"]["run_id"] == retried.run_id
    attempts = {(a["task_id"], a["attempt"]) for a in report["attempts"]}
    assert (retried.task_id, 1) in attempts and (retried.task_id, 2) in attempts
    assert report["commit_steps"] and all(s["outcome"] == "executed" for s in report["commit_steps"])
    assert {m["dataset_urn"] for m in report["watermarks"]} == {"ds-0", "ds-1"}
    html = (tmp_path / "audit.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert "<script" not in html and "<link" not in html and "src=" not in html, "self-contained"
    assert len(re.findall(r'<rect class="bar task ', html)) == len(report["attempts"])
    assert len(re.findall(r'<rect class="bar step ', html)) == len(report["commit_steps"])
    assert all(f'phase-{p}"' in html for p in ("lock", "recover", "plan", "tasks", "commit", "cleanup"))
    code, output = cli(event_log, "audit", "run-99999")
    assert code == 2 and "no run 'run-99999'" in output


def test_verify_passes_on_a_clean_history_and_lists_every_violation(event_log: EventLog) -> None:
    history(event_log)
    assert cli_json(event_log, "verify")["ok"]
    bad_sequence: SequenceFields = {"job": "job-0", "dataset_urn": "ds-0", "sequence_id": "rogue", "run_id": "rogue"}
    event_log.append([
        CommitSequencePlanned(**bad_sequence, steps=(HighWatermarkStep(partition="ds-0:0", low_watermark=0, value=5),
                                                     HighWatermarkStep(partition="ds-0:1", low_watermark=0, value=5)),
                              emitted_at=at(10_000)),
        WatermarkAdvanced(**bad_sequence, partition="ds-0:0", low_watermark=0, value=5, emitted_at=at(10_001)),
        CommitStepApplied(**bad_sequence, step_index=0, outcome="executed", emitted_at=at(10_002)),
        CommitSequenceCompleted(**bad_sequence, emitted_at=at(10_003)),
        TaskStarted(job="job-0", run_id="ghost", task_id="t", attempt=1, work_unit_ids=(), emitted_at=at(10_004)),
    ])
    with event_log.writer("vandal") as writer:
        writer.append_records([Record(0, b"junk", b"\x0b\x01Xjunk", 0)])
    code, output = cli(event_log, "verify", "--json")
    assert code == 1
    kinds = {v["kind"] for v in json.loads(output)["violations"]}
    assert {"watermark-backwards", "completed-early", "unknown-run", "undecodable"} <= kinds


def test_bad_records_are_reported_and_the_fold_goes_on_or_stops_by_flag(event_log: EventLog) -> None:
    events = history(event_log, shape=HistoryShape(jobs=1, runs=2, datasets=1))
    job_partition = partition_for("job-0", event_log.partitions)
    with event_log.writer("vandal") as writer:  # between the job's runs, in the job's partition
        writer.append_records([Record(job_partition, b"junk", b"\x0b\x05Bogus\x00\x01", 0)])
    more = history(event_log, seed=3, shape=HistoryShape(jobs=1, runs=1, datasets=1))
    state, report = Projector(event_log).rebuild(use_snapshot=False)
    assert report.events == len(events) + len(more)
    assert [p.kind for p in state.problems] == ["undecodable"]
    assert "Bogus" in state.problems[0].message and state.problems[0].partition == job_partition
    with pytest.raises(ProjectionStopped) as stopped:
        Projector(event_log, stop_on_error=True).rebuild(use_snapshot=False)
    assert stopped.value.error.partition == job_partition
    assert 0 < stopped.value.state.offsets[job_partition] <= stopped.value.error.offset  # all before it is kept
    code, output = cli(event_log, "rebuild", "--stop-on-error")
    assert code == 1 and "Bogus" in output


def test_tail_resumes_after_its_group_commits(event_log: EventLog) -> None:
    history(event_log, shape=HistoryShape(jobs=1, runs=2, datasets=1, task_failure=0.0, run_failure=0.0))
    first = cli(event_log, "tail", "--group", "downstream", "--max", "10", "--json")
    assert first[0] == 0, first[1]
    seen = [json.loads(line) for line in first[1].splitlines() if line.startswith("{")]
    second = cli(event_log, "tail", "--group", "downstream", "--max", "5", "--json")
    more = [json.loads(line) for line in second[1].splitlines() if line.startswith("{")]
    assert len(seen) == 10 and len(more) == 5
    assert not {e["event_id"] for e in seen} & {e["event_id"] for e in more}
    only = cli(event_log, "tail", "--group", "planned-only", "--type", "CommitSequencePlanned", "--max", "1", "--json",
                "--idle-timeout", "20")
    assert json.loads(only[1].splitlines()[0])["type"] == "CommitSequencePlanned"
    code, output = cli(event_log, "tail", "--type", "NoSuchEvent", "--max", "1")
    assert code == 2 and "unknown event type" in output


def test_gc_keeps_recent_runs_and_latest_states_and_verify_still_passes(event_log: EventLog) -> None:
    events = history(event_log, shape=HistoryShape(jobs=1, runs=6, datasets=2, crash=0.0, run_failure=0.0,
                                                   task_failure=0.0))
    before, _ = Projector(event_log).rebuild(use_snapshot=False)
    report = cli_json(event_log, "gc", "--keep-runs", "2")
    assert len(report["runs_deleted"]) == 4 and report["tombstones"] > 0
    assert cli_json(event_log, "verify")["ok"]
    after, _ = Projector(event_log).rebuild(use_snapshot=False)
    assert {k: v.watermarks for k, v in after.datasets.items()} == {k: v.watermarks for k, v in before.datasets.items()}
    if event_log.url.startswith("sqlite"):  # Kafka compacts later; SQLite drops tombstoned records at once
        assert sum(1 for _ in event_log.read()) < len(events)
        assert len(after.runs) == 2
