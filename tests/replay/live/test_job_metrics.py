"""`/metrics` per job, served from a real SQLite log: a failed run, then a committed one, then one in progress.

What an operator alerts on: the last run's status, the last success, the last run's duration, records and datasets
(published, failed, skipped), the runs in progress with their start; per-dataset series only when asked for.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from events.job import (
    DatasetSkipped,
    JobRunCommitted,
    JobRunFailed,
    JobRunStarted,
    JobRunSucceeded,
    WorkUnitSpec,
    WorkUnitsPlanned,
)
from events.log import EventLog, open_log
from events.model import Event, RunFields
from events.task import TaskFailed, TaskStarted, TaskSucceeded, WorkUnitResult
from replay.live.server import open_view
from replay.live.settings import LiveSettings
from tests.factories import at
from tests.replay.live.test_live_view import parse_metrics

Metrics = list[tuple[str, dict[str, str], float]]
Scrape = Callable[[bool], tuple[Metrics, str]]


def unit(urn: str) -> WorkUnitSpec:
    return WorkUnitSpec(work_unit_id=f"{urn}:0@0", dataset_urn=urn, partition=f"{urn}:0", low_watermark=0,
                        expected_high_watermark=100, multi_work_unit_id="task-0", estimated_records=100)


def result(urn: str, records: int) -> WorkUnitResult:
    return WorkUnitResult(work_unit_id=f"{urn}:0@0", dataset_urn=urn, partition=f"{urn}:0", low_watermark=0,
                          expected_high_watermark=100, actual_high_watermark=records, records_extracted=records,
                          records_written=records, bytes_written=records)


def run_fields(run_id: str) -> RunFields:
    return {"job": "orders", "run_id": run_id}


def history() -> list[Event]:
    """Run a fails (two datasets planned, its task failed), run b commits ds.0 and ds.1 and skips ds.2 (from 100 s
    to 130 s), run c is in progress."""
    a, b, c = (run_fields(r) for r in ("a", "b", "c"))
    units = (unit("ds.0"), unit("ds.1"))
    return [
        JobRunStarted(**a, emitted_at=at(0)),
        WorkUnitsPlanned(**a, work_units=units, emitted_at=at(1)),
        TaskStarted(**a, task_id="task-0", attempt=1, work_unit_ids=("ds.0:0@0", "ds.1:0@0"), emitted_at=at(2)),
        TaskFailed(**a, task_id="task-0", attempt=1, error="boom", duration_ms=5, emitted_at=at(3)),
        JobRunFailed(**a, error="task task-0 failed", failed_tasks=("task-0",), emitted_at=at(4)),
        JobRunStarted(**b, emitted_at=at(100)),
        DatasetSkipped(**b, dataset_urn="ds.2", sequence_id="s", reason="pending", emitted_at=at(101)),
        WorkUnitsPlanned(**b, work_units=units, emitted_at=at(101)),
        TaskStarted(**b, task_id="task-0", attempt=1, work_unit_ids=("ds.0:0@0", "ds.1:0@0"), emitted_at=at(102)),
        TaskSucceeded(**b, task_id="task-0", attempt=1, results=(result("ds.0", 100), result("ds.1", 50)),
                      duration_ms=5, emitted_at=at(110)),
        JobRunSucceeded(**b, tasks=1, records_extracted=150, records_written=150, emitted_at=at(111)),
        JobRunCommitted(**b, datasets_committed=("ds.0", "ds.1"), datasets_skipped=("ds.2",), emitted_at=at(130)),
        JobRunStarted(**c, emitted_at=at(200)),
    ]


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    opened = open_log(f"sqlite:///{tmp_path / 'events.db'}")
    opened.ensure_topic()
    opened.append(history())
    yield opened
    opened.close()


@pytest.fixture
def scrape(log: EventLog) -> Iterator[Scrape]:
    """`scrape(dataset_metrics)`: serve the log (folding in a thread, as `oncelog serve`) and GET /metrics once
    caught up."""
    stops: list[Callable[[], None]] = []

    def serve_and_get(dataset_metrics: bool) -> tuple[Metrics, str]:
        view, server = open_view(LiveSettings(log.url, port=0, snapshot_every=0, dataset_metrics=dataset_metrics))
        stop = threading.Event()
        threads = [threading.Thread(target=view.run, args=(stop,), daemon=True),
                   threading.Thread(target=server.serve_forever, daemon=True)]
        for thread in threads:
            thread.start()
        def shut() -> None:
            stop.set()
            server.shutdown()
            server.server_close()
            view.log.close()

        stops.append(shut)
        base = f"http://127.0.0.1:{server.server_address[1]}"
        deadline = time.monotonic() + 30
        while "\noncelog_live_caught_up 1\n" not in (text := get(f"{base}/metrics")):
            assert time.monotonic() < deadline, text
            time.sleep(0.1)
        return parse_metrics(text), text

    yield serve_and_get
    for stop in stops:
        stop()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return response.read().decode()


def values(metrics: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """A metric's samples by their labels."""
    return {tuple(sorted(labels.items())): value for n, labels, value in metrics if n == name}


def test_metrics_tell_each_jobs_last_run_last_success_and_runs_in_progress(scrape: Scrape
                                                                           ) -> None:
    metrics, text = scrape(False)
    job = (("job", "orders"),)
    status = values(metrics, "oncelog_job_last_run_status")
    assert {labels[1][1]: v for labels, v in status.items()} == {"committed": 1, "failed": 0, "cancelled": 0}
    assert values(metrics, "oncelog_job_last_success_timestamp_seconds") == {job: at(130).timestamp()}
    assert values(metrics, "oncelog_job_last_run_duration_seconds") == {job: 30.0}
    assert values(metrics, "oncelog_job_last_run_records") == {
        (*job, ("outcome", "written")): 150, (*job, ("outcome", "published")): 150}
    assert values(metrics, "oncelog_job_last_run_datasets") == {
        (*job, ("outcome", "published")): 2, (*job, ("outcome", "failed")): 0, (*job, ("outcome", "skipped")): 1}
    assert values(metrics, "oncelog_job_runs_in_progress") == {job: 1}
    assert values(metrics, "oncelog_run_in_progress_start_timestamp_seconds") == {
        (*job, ("run_id", "c")): at(200).timestamp()}
    assert values(metrics, "oncelog_job_consecutive_failures") == {job: 0}
    assert "oncelog_dataset_watermark" not in text, "per-dataset series are off by default"
    assert "# TYPE oncelog_dataset_watermark gauge" in scrape(True)[1], "and served when asked for"


def test_a_failed_last_run_is_one_series_to_alert_on(log: EventLog, scrape: Scrape) -> None:
    d = run_fields("d")
    log.append([JobRunStarted(**d, emitted_at=at(300)), WorkUnitsPlanned(**d, work_units=(unit("ds.0"),),
                                                                        emitted_at=at(301)),
                JobRunFailed(**d, error="boom", emitted_at=at(360))])
    metrics, text = scrape(False)
    job = (("job", "orders"),)
    status = values(metrics, "oncelog_job_last_run_status")
    assert {labels[1][1]: v for labels, v in status.items()} == {"committed": 0, "failed": 1, "cancelled": 0}
    assert values(metrics, "oncelog_job_last_success_timestamp_seconds") == {job: at(130).timestamp()}
    assert values(metrics, "oncelog_job_last_run_datasets")[(*job, ("outcome", "failed"))] == 1
    assert values(metrics, "oncelog_job_consecutive_failures") == {job: 1}
    text_types = {n for n, _, _ in metrics}
    assert "oncelog_live_events_folded_total" in text_types
