"""The audit of a failed run points at the culprits: what failed and why comes first (terminal, JSON and HTML), the
datasets a task failed on lead the datasets, with their error's first line, and names sort as people read them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.job import (
    JobLockAcquired,
    JobLockReleased,
    JobRunFailed,
    JobRunStarted,
    WorkUnitSpec,
    WorkUnitsPlanned,
)
from events.log import EventLog, open_log
from events.model import Event, RunFields, TaskFields
from events.task import TaskFailed, TaskRetried, TaskStarted, TaskSucceeded, WorkUnitResult
from oncelog.cli import app
from replay.audit import FAILED, FAILED_WITH_TASK, NOT_PUBLISHED, audit, natural_key
from replay.audit_html import render_html, write_html
from tests.browser import Browser, parse_dom

T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
DATASETS = 3000
RUN: RunFields = {"job": "wide", "run_id": "run-failed"}
CROSS_FS = ("FileSystemError: /data/staging/ds.1234/part-0.avro and s3a://hb/out/ds.1234/part-0.avro lie on "
            "different file systems: oncelog moves files within one")
PY4J = ("Py4JJavaError: An error occurred while calling o87.save.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Lost task 0.0 in stage 3.0: "
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/opt/job/converters.py", line 12, in convert\n'
        "ValueError: bad record in ds.17:0\n\n\tat org.apache.spark.scheduler.Task.run(Task.scala:147)")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def failed_run(tmp_path: Path) -> Iterator[EventLog]:
    """A run of 3,000 datasets packed into two tasks of 1,500 (as on two cores), each failing on one dataset: task 0
    on ds.1234 as this version records it (cause, work unit, dataset, not retriable), task 1 on ds.17 as a log of an
    earlier version has it (only the error, py4j frames and all; twice, retried in between)."""
    log = open_log(f"sqlite:///{tmp_path / 'events.db'}")
    log.ensure_topic()
    units = [WorkUnitSpec(work_unit_id=f"ds.{i}:0@0", dataset_urn=f"ds.{i}", partition=f"ds.{i}:0", low_watermark=0,
                          expected_high_watermark=10, multi_work_unit_id=f"task-{i % 2:05d}") for i in range(DATASETS)]
    events: list[Event] = [JobLockAcquired(**RUN, holder="h:1", emitted_at=at(0)),
                           JobRunStarted(**RUN, properties={"job.name": "wide"}, emitted_at=at(0)),
                           WorkUnitsPlanned(**RUN, work_units=tuple(units), emitted_at=at(1))]
    for t in range(2):
        task: TaskFields = {**RUN, "task_id": f"task-{t:05d}"}
        ids = tuple(u.work_unit_id for u in units[t::2])
        events.append(TaskStarted(**task, attempt=1, work_unit_ids=ids, emitted_at=at(2)))
    events += [TaskFailed(**RUN, task_id="task-00000", attempt=1, error=f"{CROSS_FS}\n  File x.py, line 1",
                          cause=CROSS_FS, failed_work_unit="ds.1234:0@0", failed_dataset="ds.1234", retriable=False,
                          emitted_at=at(3)),
               TaskFailed(**RUN, task_id="task-00001", attempt=1, error=PY4J, emitted_at=at(3)),
               TaskRetried(**RUN, task_id="task-00001", attempt=1, next_attempt=2, delay_s=1, emitted_at=at(3)),
               TaskStarted(**RUN, task_id="task-00001", attempt=2, work_unit_ids=tuple(u.work_unit_id
                                                                                      for u in units[1::2]),
                           emitted_at=at(4)),
               TaskFailed(**RUN, task_id="task-00001", attempt=2, error=PY4J, emitted_at=at(5)),
               JobRunFailed(**RUN, error="task task-00000 failed after 1 attempt(s): …", emitted_at=at(6)),
               JobLockReleased(**RUN, emitted_at=at(7))]
    log.append([part for event in events for part in event.in_parts()])
    yield log
    log.close()


def test_names_sort_as_people_read_them() -> None:
    names = ["ds.10", "ds.2", "ds.1", "ds.0", "ds.100", "ds.1:0@0", "a"]
    assert sorted(names, key=natural_key) == ["a", "ds.0", "ds.1", "ds.1:0@0", "ds.2", "ds.10", "ds.100"]


def test_the_culprits_lead_the_audit_and_its_datasets(failed_run: EventLog) -> None:
    timeline = audit(failed_run, "run-failed")
    failures = timeline.failures()
    assert [(f.dataset_urn, f.task_id, f.attempts_failed, f.retriable) for f in failures] == [
        ("ds.17", "task-00001", 2, True), ("ds.1234", "task-00000", 1, False)], "ds.17 before ds.1234"
    assert failures[0].cause == "Py4JJavaError: An error occurred while calling o87.save.", \
        "an event of an earlier version says what its error's first line says"
    assert failures[1].cause == CROSS_FS
    rows = timeline.dataset_rows()
    assert [(r.dataset_urn, r.status, r.error) for r in rows[:2]] == [("ds.17", FAILED, failures[0].cause),
                                                                      ("ds.1234", FAILED, CROSS_FS)]
    assert [r.dataset_urn for r in rows[2:6]] == ["ds.0", "ds.1", "ds.2", "ds.3"]
    assert {r.status for r in rows[2:]} == {FAILED_WITH_TASK} and len(rows) == DATASETS
    assert rows[2].error == "its task task-00000 failed on ds.1234 (work unit ds.1234:0@0)"
    assert [w.spec.work_unit_id for w in timeline.work_units[9:12]] == ["ds.9:0@0", "ds.10:0@0", "ds.11:0@0"]


def test_the_terminal_audit_shows_the_culprits_on_its_first_screen(failed_run: EventLog, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["audit", "latest", "--log", f"sqlite:///{tmp_path / 'events.db'}"])
    assert result.exit_code == 0, result.output
    first_screen = result.output.splitlines()[:10]
    assert first_screen[0].startswith("wide run run-failed: FAILED")
    table = first_screen[first_screen.index("What failed (2 task(s)):") + 2:]
    culprits = table[:2]
    assert [line.split()[:4] for line in culprits] == [["ds.17", "ds.17:0@0", "task-00001", "2"],
                                                       ["ds.1234", "ds.1234:0@0", "task-00000", "1"]], culprits
    assert culprits[1].endswith(f"(not retriable)  {CROSS_FS}")
    attempts = result.output[result.output.index("Task attempts:"):]
    assert "\tat org.apache" not in attempts and "ValueError" not in attempts, "first lines only: no frames"


def table_rows(html: str, table_id: str) -> list[list[str]]:
    """The text of each body row's cells of a table of the report (its rows and cells leave their end tags out)."""
    body = html.split(f'<table id="{table_id}">', 1)[1].split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [[unescape(re.sub(r"<[^>]+>", "", cell)) for cell in row.split("<td>")[1:]]
            for row in body.split("<tr>")[1:]]


def test_the_html_audit_starts_with_what_failed(failed_run: EventLog) -> None:
    html = render_html(audit(failed_run, "run-failed"))
    body = html.split("<body>", 1)[1]
    assert body.index('id="what-failed"') < body.index("<h2>Summary</h2>"), "what failed comes first"
    rows = table_rows(html, "failures")
    assert [r[:4] for r in rows] == [["ds.17", "ds.17:0@0", "task-00001", "2"],
                                     ["ds.1234", "ds.1234:0@0", "task-00000", "1 (not retriable)"]]
    assert rows[1][4] == CROSS_FS
    datasets = table_rows(html, "datasets")[:3]
    assert [(d[0], d[5]) for d in datasets] == [("ds.17", FAILED), ("ds.1234", FAILED), ("ds.0", FAILED_WITH_TASK)]
    assert datasets[1][10] == CROSS_FS


def test_a_browser_shows_the_culprits_on_the_first_screen(failed_run: EventLog, tmp_path: Path,
                                                          browser: Browser) -> None:
    """Chromium lays the report out: the section of what failed comes first, its two culprits in it, before the
    summary, the timeline and the 3,000 datasets."""
    report = tmp_path / "failed.html"
    write_html(audit(failed_run, "run-failed"), report)
    page = parse_dom(browser.dump_dom(report).dom)
    failures = page.by_id("what-failed").by_id("failures")
    rows = [[c.text() for c in row.all(lambda e: e.tag == "td")] for row in failures.all(lambda e: e.tag == "tr")[1:]]
    assert [r[0] for r in rows] == ["ds.17", "ds.1234"] and rows[1][4] == CROSS_FS
    headings = [h.text() for h in page.all(lambda e: e.tag == "h2")]
    assert headings[:2] == ["What failed", "Summary"], headings
    shot = browser.screenshot(report, tmp_path / "first-screen.png", height=900)
    assert shot.stat().st_size > 10_000


@pytest.fixture
def isolated_run(tmp_path: Path) -> Iterator[EventLog]:
    """A pack of four datasets whose attempt failed, split to isolate it (engines/isolation.py): part .1 (ds.0, ds.1)
    succeeded, part .2 (ds.2, ds.3) failed and was split again: .2.1 (ds.2) succeeded, .2.2 (ds.3) failed alone,
    twice (retried in between)."""
    log = open_log(f"sqlite:///{tmp_path / 'events.db'}")
    log.ensure_topic()
    units = [WorkUnitSpec(work_unit_id=f"ds.{i}:0@0", dataset_urn=f"ds.{i}", partition=f"ds.{i}:0", low_watermark=0,
                          expected_high_watermark=10, multi_work_unit_id="task-00000") for i in range(4)]
    cause = "SyntheticFailure: injected failure at offset 3 of ds.3:0"
    events: list[Event] = [JobLockAcquired(**RUN, holder="h:1", emitted_at=at(0)),
                           JobRunStarted(**RUN, properties={"job.name": "wide"}, emitted_at=at(0)),
                           WorkUnitsPlanned(**RUN, work_units=tuple(units), emitted_at=at(1))]

    def attempt(task_id: str, number: int, unit_ids: range, fails: bool, second: float) -> list[Event]:
        ids = tuple(units[i].work_unit_id for i in unit_ids)
        started = TaskStarted(**RUN, task_id=task_id, attempt=number, work_unit_ids=ids, emitted_at=at(second))
        if fails:
            return [started, TaskFailed(**RUN, task_id=task_id, attempt=number, error=cause, cause=cause,
                                        failed_work_unit="ds.3:0@0", failed_dataset="ds.3", emitted_at=at(second))]
        results = tuple(WorkUnitResult(work_unit_id=units[i].work_unit_id, dataset_urn=units[i].dataset_urn,
                                       partition=units[i].partition, low_watermark=0, expected_high_watermark=10,
                                       actual_high_watermark=10, records_written=10) for i in unit_ids)
        return [started, TaskSucceeded(**RUN, task_id=task_id, attempt=number, results=results, emitted_at=at(second))]

    events += [*attempt("task-00000", 1, range(4), True, 2), *attempt("task-00000.1", 2, range(2), False, 3),
               *attempt("task-00000.2", 2, range(2, 4), True, 3), *attempt("task-00000.2.1", 3, range(2, 3), False, 4),
               *attempt("task-00000.2.2", 3, range(3, 4), True, 4),
               TaskRetried(**RUN, task_id="task-00000.2.2", attempt=3, next_attempt=4, delay_s=1, emitted_at=at(4)),
               *attempt("task-00000.2.2", 4, range(3, 4), True, 5),
               JobRunFailed(**RUN, error="task task-00000.2.2 failed", emitted_at=at(6)),
               JobLockReleased(**RUN, emitted_at=at(7))]
    log.append([part for event in events for part in event.in_parts()])
    yield log
    log.close()


def test_a_pack_split_to_isolate_its_failure_shows_its_parts_and_the_culprit_first(isolated_run: EventLog,
                                                                                   tmp_path: Path) -> None:
    timeline = audit(isolated_run, "run-failed")
    failures = timeline.failures()
    assert [(f.task_id, f.culprit, f.parts, f.failed_parts) for f in failures] == [
        ("task-00000.2.2", True, (), ()),
        ("task-00000", False, ("task-00000.1", "task-00000.2"), ("task-00000.2.2",)),
        ("task-00000.2", False, ("task-00000.2.1", "task-00000.2.2"), ("task-00000.2.2",))]
    rows = {r.dataset_urn: r for r in timeline.dataset_rows()}
    assert rows["ds.3"].status == FAILED and [rows[f"ds.{i}"].status for i in range(3)] == [NOT_PUBLISHED] * 3, \
        "the datasets of the split pack's succeeded parts did not fail with it"
    assert {t.task_id: t.status for t in timeline.task_rows()} == {
        "task-00000": "split into 2 parts", "task-00000.1": "succeeded", "task-00000.2": "split into 2 parts",
        "task-00000.2.1": "succeeded", "task-00000.2.2": "failed"}

    shown = CliRunner().invoke(app, ["audit", "latest", "--log", f"sqlite:///{tmp_path / 'events.db'}"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    culprits = lines[lines.index("What failed (1 task(s)):") + 2:][:1]
    assert culprits[0].split()[:4] == ["ds.3", "ds.3:0@0", "task-00000.2.2", "2"], lines[:12]
    split = lines[lines.index("Split into parts to isolate the failure (2 task(s)):") + 2:][:2]
    assert [line.split()[:4] for line in split] == [
        ["task-00000", "task-00000.1,", "task-00000.2", "task-00000.2.2"],
        ["task-00000.2", "task-00000.2.1,", "task-00000.2.2", "task-00000.2.2"]], split

    html = render_html(timeline)
    assert [r[:3] for r in table_rows(html, "failures")] == [["ds.3", "ds.3:0@0", "task-00000.2.2"]]
    assert [r[:3] for r in table_rows(html, "split")] == [
        ["task-00000", "task-00000.1, task-00000.2", "task-00000.2.2"],
        ["task-00000.2", "task-00000.2.1, task-00000.2.2", "task-00000.2.2"]]
    assert [(r[0], r[1]) for r in table_rows(html, "tasks")] == [
        ("task-00000.2.2", "failed"), ("task-00000", "split into 2 parts"), ("task-00000.2", "split into 2 parts"),
        ("task-00000.1", "succeeded"), ("task-00000.2.1", "succeeded")]
