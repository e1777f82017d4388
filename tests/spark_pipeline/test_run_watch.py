"""A run's watch (spark_pipeline/progress.py) follows the run's events in its log while it runs: each failed attempt
reaches the display as it is recorded (another run's, or another job's, never), in both displays; the run's start
and end are kept as the log records them."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from rich.console import Console

from events.job import JobRunFailed, JobRunStarted
from events.log import open_log
from events.task import TaskFailed
from projections.views import Phase
from spark_pipeline.progress import FailedAttempt, PlainProgress, RichProgress, RunWatch, Watched
from tests.log_fixtures import LogFactory

T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def failed(run_id: str, attempt: int, job: str = "orders", next_attempt: int = 0) -> TaskFailed:
    return TaskFailed(job=job, run_id=run_id, task_id="task-00001", attempt=attempt, error="ConnectionError: gone\n…",
                      cause="ConnectionError: gone", failed_work_unit="orders.7:0@0", failed_dataset="orders.7",
                      next_attempt=next_attempt, retry_delay_s=300.0 if next_attempt else 0.0,
                      emitted_at=T0 + timedelta(seconds=attempt))


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_each_failed_attempt_of_the_run_is_told_as_it_is_recorded(log_factory: LogFactory) -> None:
    """On each store: the watch reads through a connection of its own, as `oncelog run`'s does."""
    seen: list[FailedAttempt] = []
    log = log_factory()
    watch = RunWatch(lambda: open_log(log.url), "orders", "run-1", seen.append, poll_s=0.05)
    observer = Watched(PlainProgress(io.StringIO(), "orders run run-1"), watch)
    log.append([failed("run-0", 1)])  # before the run began: not its concern
    observer.phase(Phase.LOCK)
    log.append([JobRunStarted(job="orders", run_id="run-1", properties={}, emitted_at=T0)])
    log.append([failed("run-1", 1, next_attempt=2), failed("run-1", 1, job="other")])
    wait_for(lambda: len(seen) == 1)
    assert [(f.task_id, f.attempt, f.dataset, f.next_attempt) for f in seen] == [("task-00001", 1, "orders.7", 2)]
    assert seen[0].next_at == T0 + timedelta(seconds=301)
    log.append([failed("run-1", 2), JobRunFailed(job="orders", run_id="run-1", error="…",
                                                 emitted_at=T0 + timedelta(seconds=20))])
    observer.phase(Phase.CLEANUP)  # the display's next phase comes after the last failures
    assert [f.attempt for f in seen] == [1, 2]
    watch.stop()
    assert watch.seconds == 20.0


def test_both_displays_show_a_failed_attempt_on_a_line_of_its_own() -> None:
    retried = FailedAttempt("task-00001", 1, "ConnectionError: gone", "orders.7:0@0", "orders.7", True, 2,
                            datetime.now(UTC) + timedelta(seconds=300))
    final = FailedAttempt("task-00002", 1, "FileSystemError: a and b lie on different file systems", "", "", False)
    plain = io.StringIO()
    shown = PlainProgress(plain, "orders run run-1")
    for attempt in (retried, final):
        shown.attempt_failed(attempt)
    lines = plain.getvalue().splitlines()
    assert re.search(rf"task task-00001 attempt 1 failed on orders\.7 \(work unit orders\.7:0@0\): ConnectionError: "
                     rf"gone; attempt 2 at {retried.next_at:%H:%M:%S} UTC \(in (300|299)s\)$", lines[0]), lines
    assert lines[1].endswith("task task-00002 attempt 1 failed: FileSystemError: a and b lie on different file "
                             "systems; not retried: no retry can fix this"), lines
    terminal = Console(file=io.StringIO(), force_terminal=True, width=200, record=True)
    with RichProgress(terminal) as rich:
        rich.phase(Phase.TASKS, 2)
        rich.attempt_failed(final)
    assert "✗ task task-00002 attempt 1 failed: FileSystemError" in terminal.export_text()
