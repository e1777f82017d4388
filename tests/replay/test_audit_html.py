"""The HTML audit report and a job's history page, rendered by headless Chromium and read as a person would see them:
the time axis from JobRunStarted, the phases, tasks with records and throughput, the datasets' filter of a
10,000-dataset run, tracebacks as they were raised, the Spark application, the chart of a job's runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks.audit_run import APP_ID, TRACEBACK, at, dataset_commit, large_run, result
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
from events.log import EventLog, open_log
from events.model import Event, RunFields
from events.task import (
    TaskFailed,
    TaskRetried,
    TaskStarted,
    TaskSucceeded,
)
from oncelog.cli import app
from projections.state import State
from replay.audit import AUDITED_PHASES, audit
from replay.audit_html import LABEL_WIDTH, write_html
from replay.history_html import JobNotFoundError, write_history_html
from tests.browser import Browser, Element, parse_dom

LARGE_DATASETS = 10_000
TWO_MB = 2 * 1024 * 1024


@pytest.fixture
def sqlite_log(tmp_path: Path) -> Iterator[EventLog]:
    log = open_log(f"sqlite:///{tmp_path / 'events.db'}")
    log.ensure_topic()
    yield log
    log.close()


def small_runs(log: EventLog) -> None:
    """Run 1 of job `small` plans two datasets' sequences and dies after the first step of `b`; run 2 (at +100 s)
    finishes that sequence in its recovery, plans, runs a task that fails once with a traceback, and commits."""
    first: RunFields = {"job": "small", "run_id": "run-1"}
    unit = WorkUnitSpec(work_unit_id="wu-b", dataset_urn="b", partition="b:0", low_watermark=0,
                        expected_high_watermark=10)
    crashed = dataset_commit(first, "b", 3.0, 4.0, 10, 100)
    log.append([JobLockAcquired(**first, holder="h:1", emitted_at=at(0)),
                JobRunStarted(**first, properties={"job.name": "small"}, emitted_at=at(0)),
                WorkUnitsPlanned(**first, work_units=(unit,), emitted_at=at(0.5)),
                TaskStarted(**first, task_id="t-b", attempt=1, work_unit_ids=("wu-b",), emitted_at=at(1)),
                TaskSucceeded(**first, task_id="t-b", attempt=1, results=(result(first, unit, 10, 100),),
                              emitted_at=at(2)),
                crashed[0]])
    log.append(crashed[1:2])  # the first step applied, then the driver died
    second: RunFields = {"job": "small", "run_id": "run-2"}
    units = tuple(WorkUnitSpec(work_unit_id=f"wu-{urn}", dataset_urn=urn, partition=f"{urn}:0", low_watermark=0,
                               expected_high_watermark=n) for urn, n in (("a", 1000), ("c", 3000)))
    log.append([JobLockAcquired(**second, holder="h:2", emitted_at=at(100)),
                JobRunStarted(**second, properties={"job.name": "small", "spark.app.id": APP_ID},
                              emitted_at=at(100))])
    log.append([e.model_copy(update={"emitted_at": at(100.2 + 0.4 * n)}) for n, e in enumerate(crashed[2:])])
    log.append([WorkUnitsPlanned(**second, work_units=units, emitted_at=at(102)),
                TaskStarted(**second, task_id="t-0", attempt=1, work_unit_ids=("wu-a", "wu-c"), executor="exec-1",
                            emitted_at=at(102.5)),
                TaskFailed(**second, task_id="t-0", attempt=1, error=TRACEBACK, emitted_at=at(103)),
                TaskRetried(**second, task_id="t-0", attempt=1, next_attempt=2, delay_s=0.5, emitted_at=at(103)),
                TaskStarted(**second, task_id="t-0", attempt=2, work_unit_ids=("wu-a", "wu-c"), executor="exec-2",
                            emitted_at=at(103.5)),
                TaskSucceeded(**second, task_id="t-0", attempt=2, duration_ms=2000,
                              results=tuple(result(second, u, u.expected_high_watermark, 40_000) for u in units),
                              emitted_at=at(105.5)),
                JobRunSucceeded(**second, tasks=1, records_written=4000, emitted_at=at(105.6)),
                *dataset_commit(second, "a", 105.7, 106.2, 1000, 40_000),
                *dataset_commit(second, "c", 105.7, 106.4, 3000, 40_000),
                JobRunCommitted(**second, datasets_committed=("a", "c"), emitted_at=at(106.5)),
                JobLockReleased(**second, emitted_at=at(106.8))])


def bars(page: Element, kind: str) -> list[Element]:
    return page.with_class(kind, "rect")


def cells(row: Element) -> list[str]:
    return [cell.text() for cell in row.all(lambda e: e.tag == "td")]


def start_of(bar: Element) -> float:
    return float(bar.attrs["data-start"] or "nan")


def test_a_small_run_shows_its_phases_on_an_axis_that_starts_at_job_run_started(
        sqlite_log: EventLog, tmp_path: Path, browser: Browser) -> None:
    small_runs(sqlite_log)
    timeline = audit(sqlite_log, "run-2")
    report = tmp_path / "run-2.html"
    write_html(timeline, report)
    html = report.read_text(encoding="utf-8")
    assert "<script" not in html and "<link" not in html and "src=" not in html, "small reports need no script"
    page = parse_dom(browser.dump_dom(report).dom)

    ticks = page.all(lambda e: e.tag == "text" and "tick" in e.classes)
    assert ticks[0].text() == "0 s" and float(ticks[0].attrs["x"] or "nan") == LABEL_WIDTH
    (run_bar,) = bars(page, "run")
    assert start_of(run_bar) == 0.0 and float(run_bar.attrs["data-end"] or "nan") == pytest.approx(6.8)
    assert float(run_bar.attrs["x"] or "nan") == LABEL_WIDTH
    tasks = bars(page, "task")
    assert len(tasks) == 2 and min(start_of(b) for b in tasks) == pytest.approx(2.5), "the first task starts later"
    phases = {p.value: bars(page, f"phase-{p.value}") for p in AUDITED_PHASES}
    assert all(len(found) == 1 for found in phases.values()), {p: len(b) for p, b in phases.items()}
    recover = phases["recover"][0]
    assert (start_of(recover), float(recover.attrs["data-end"] or "nan")) == (0.0, pytest.approx(1.8)), \
        "recovery lasts while run-1's sequence is finished"
    assert start_of(phases["tasks"][0]) == pytest.approx(2.0) and start_of(phases["cleanup"][0]) == pytest.approx(6.5)
    assert page.by_id("recovered").text().count("run-1") == 1

    rows = {cells(r)[0]: cells(r) for r in page.by_id("tasks").all(lambda e: e.tag == "tr")[1:]}
    assert rows["t-0"][2:8] == ["2", "2: wu-a, wu-c", "4,000", "78.1 KiB", "2", "2 s"]
    assert rows["t-0"][8] == "2,000", "records per second of the last attempt"
    datasets = {cells(r)[0]: cells(r) for r in page.by_id("datasets").all(lambda e: e.tag == "tr")[1:]}
    assert datasets["c"][1:6] == ["1", "3,000", "39.1 KiB", "1", "completed"]

    assert page.by_id("spark-app-id").text() == APP_ID
    tracebacks = [p for p in page.all(lambda e: e.tag == "pre") if "Traceback" in p.text()]
    assert tracebacks and tracebacks[0].text() == TRACEBACK, "a traceback keeps its lines"


def test_a_run_without_an_end_or_a_spark_application_says_so(sqlite_log: EventLog, tmp_path: Path,
                                                             browser: Browser) -> None:
    small_runs(sqlite_log)
    report = tmp_path / "run-1.html"
    write_html(audit(sqlite_log, "run-1"), report)
    page = parse_dom(browser.dump_dom(report).dom)
    summary = page.first(lambda e: e.tag == "dl")
    assert summary is not None and "no end in the log" in summary.text() and "spark.app.id" in summary.text()
    assert {b.attrs["class"] for b in bars(page, "phase")} == {
        "bar phase phase-lock", "bar phase phase-recover", "bar phase phase-plan", "bar phase phase-tasks",
        "bar phase phase-commit"}, "a crashed run shows the phases it reached, and no cleanup"


def test_a_10000_dataset_run_stays_small_readable_and_filterable(sqlite_log: EventLog, tmp_path: Path,
                                                                browser: Browser) -> None:
    for batch in large_run("run-wide", LARGE_DATASETS, tasks=200):
        sqlite_log.append([part for event in batch for part in event.in_parts()])  # as the run's sink appends them
    report = tmp_path / "wide.html"
    write_html(audit(sqlite_log, "run-wide"), report)
    size = report.stat().st_size
    assert size < TWO_MB, f"{size:,} bytes"

    page = parse_dom(browser.dump_dom(report).dom)  # its load time is a figure of benchmarks/audit_page.py
    assert {p.value for p in AUDITED_PHASES if bars(page, f"phase-{p.value}")} == {p.value for p in AUDITED_PHASES}
    svg = page.first(lambda e: e.tag == "svg")
    assert svg is not None and float(svg.attrs["height"] or "nan") < 2500, "no lane per step: the chart fits a screen"
    assert len(page.all(lambda e: e.tag == "rect")) < 300
    assert page.with_class("curve", "polygon"), "datasets committed over time, as a curve"
    assert page.by_id("spark-app-id").text() == APP_ID
    rows = page.by_id("datasets").all(lambda e: e.tag == "tr")[1:]
    first = [cells(r) for r in rows]
    assert len(rows) == 500 and page.by_id("datasets-matching").text() == f"{LARGE_DATASETS:,}"
    assert [c[0] for c in first[:10]] == [f"kafka.events.topic-{i:05d}" for i in range(0, LARGE_DATASETS, 1000)], \
        "the datasets with a failed step come first"
    assert first[0][1:8] == ["1", "100", "4.0 KiB", "1", "completed", "3/3 (1 verified)", "1"]
    assert page.by_id("commit-steps").text().count("timeout #1") == LARGE_DATASETS // 1000, \
        "only the steps that failed are listed one by one"
    assert page.by_id("dataset-filter").tag == "input"

    filtered = parse_dom(browser.dump_dom(report, "#filter=topic-0420").dom)
    shown = filtered.by_id("datasets").all(lambda e: e.tag == "tr")[1:]
    assert [cells(r)[0] for r in shown] == [f"kafka.events.topic-0420{d}" for d in range(10)]
    assert filtered.by_id("datasets-shown").text() == filtered.by_id("datasets-matching").text() == "10"


def test_a_job_history_charts_its_last_runs(sqlite_log: EventLog, tmp_path: Path, browser: Browser) -> None:
    events: list[Event] = []
    for n in range(60):
        run: RunFields = {"job": "nightly", "run_id": f"run-{n:03d}"}
        begin = n * 1000.0
        events += [JobRunStarted(**run, emitted_at=at(begin)),
                   JobRunSucceeded(**run, tasks=1, records_written=100 * n, emitted_at=at(begin + 5 + n % 7))]
        events.append(JobRunFailed(**run, error=TRACEBACK, emitted_at=at(begin + 9)) if n % 10 == 3 else
                      JobRunCommitted(**run, datasets_committed=("x",), emitted_at=at(begin + 10 + n % 7)))
    sqlite_log.append(events)
    state = State()
    for logged in sqlite_log.read():
        state.apply(logged)
    page_file = tmp_path / "history.html"
    write_history_html(state, "nightly", page_file, last=50)
    page = parse_dom(browser.dump_dom(page_file).dom)
    runs = page.with_class("run-bar", "rect")
    assert len(runs) == 50 and runs[0].attrs["data-run"] == "run-010" and runs[-1].attrs["data-run"] == "run-059"
    failed = [r.attrs["data-run"] for r in runs if "status-failed" in r.classes]
    assert failed == ["run-013", "run-023", "run-033", "run-043", "run-053"]
    durations = {r.attrs["data-run"]: float(r.attrs["data-seconds"] or "nan") for r in runs}
    assert durations["run-059"] == 13.0 and durations["run-013"] == 9.0
    records = {r.attrs["data-run"]: int(r.attrs["data-records"] or "-1")
               for r in page.with_class("records-bar", "rect")}
    assert records["run-059"] == 5900
    assert "Traceback" in page.by_id("runs").text()
    with pytest.raises(JobNotFoundError, match="nightly"):
        write_history_html(state, "nighlty", tmp_path / "none.html")
    from_cli = tmp_path / "cli.html"
    done = CliRunner().invoke(app, ["history", "nightly", "--html", str(from_cli), "--last", "50",
                                    "--log", sqlite_log.url])
    assert done.exit_code == 0, done.output
    assert from_cli.read_text() == page_file.read_text()
    refused = CliRunner().invoke(app, ["history", "nightly", "--html", str(from_cli), "--last", "0",
                                       "--log", sqlite_log.url])
    assert refused.exit_code == 2
