"""Ctrl-C in a real terminal (a tmux pane): the first answers at once and says what happens, the second stops now.

The job's DataFrame function holds its task on the driver (a step Spark's cancellation cannot reach: a slow driver-side
call), so the run is still alive after the first Ctrl-C; the second must end it long before that step would end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame

from events.job import JobRunCancelled
from events.log import open_log
from events.task import TaskEvent
from tests.fault.pipeline_checks import published_records, write_job

pytestmark = pytest.mark.spark
ROOT = Path(__file__).parents[3]
HELD_S = 600
"""How long the task's driver-side step lasts when nothing stops it."""
SOON_S = 60.0
"""Generous bounds for what must happen at once (the message) and soon (the exit): far below HELD_S."""


def held_on_the_driver(frame: DataFrame) -> DataFrame:
    """A DataFrame function that keeps its task busy on the driver for HELD_S (unless the process ends)."""
    time.sleep(HELD_S)
    return frame


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """A private tmux server with one wide pane; yields `pane(*keys)`: send keys (if any), return the pane's text."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed: the Ctrl-C test needs a real terminal")
    socket = f"oncelog-test-{os.getpid()}"
    tmux = ["tmux", "-L", socket]
    subprocess.run([*tmux, "new-session", "-d", "-s", "run", "-x", "250", "-y", "50", "-c", str(ROOT)], check=True)

    def pane(*keys: str) -> str:
        if keys:
            subprocess.run([*tmux, "send-keys", "-t", "run", *keys], check=True)
        return subprocess.run([*tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", "run"], check=True,
                              capture_output=True, text=True).stdout

    yield pane
    subprocess.run([*tmux, "kill-server"], check=False)


def wait_until(what: str, done: Callable[[], bool], timeout: float, shown: Callable[[], str],
               stuck: Callable[[], None] = lambda: None) -> None:
    """Poll `done` until true; after `timeout`, call `stuck` (say where the run is), then fail naming `what` and
    showing `shown()`."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            stuck()
            pytest.fail(f"{what} not within {timeout:.0f}s; the terminal shows:\n{shown()}")
        time.sleep(0.2)


def dump_stacks(job: Path) -> Callable[[], None]:
    """Have the run of `job` print every thread's stack to the terminal (faulthandler on SIGABRT), then wait a
    moment for it: where a run that does not end is stuck."""

    def dump() -> None:
        subprocess.run(["pkill", "-ABRT", "-f", f"oncelog run {job}"], check=False)
        time.sleep(2)

    return dump


def test_ctrl_c_says_what_it_does_and_a_second_one_stops_now(tmp_path: Path, terminal: Callable[..., str]) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{"task.engine": "dataframe", "task.maxretries": 3,
                                                    "task.retry.intervalinsec": 300,
                                                    "converter.dataframe.functions": f"{__name__}.held_on_the_driver"})
    exit_file = tmp_path / "exit-code"
    terminal(f"PYTHONFAULTHANDLER=1 {sys.executable} -m oncelog run {job}; echo $? > {exit_file}", "Enter")
    wait_until("the tasks phase", lambda: "running 1 task(s)" in terminal(), 120, terminal)
    time.sleep(1)

    terminal("C-c")
    wait_until("the first Ctrl-C's message", lambda: "cancelling:" in terminal(), SOON_S, terminal)
    first = terminal()
    assert "press Ctrl-C again" in first and "nothing will be published" in first
    assert not exit_file.exists(), "the run ended at the first Ctrl-C: the test's task must outlive it"

    terminal("C-c")
    wait_until("the exit after the second Ctrl-C", exit_file.exists, SOON_S, terminal, dump_stacks(job))
    assert exit_file.read_text().strip() == "130", terminal()
    shown = terminal()
    assert shown.index("cancelling:") < shown.index("stopping now:") < shown.index("CANCELLED")
    assert "Traceback" not in shown, shown

    runs = subprocess.run([sys.executable, "-m", "oncelog", "runs", "--json", "--log", url], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert [r["status"] for r in json.loads(runs.stdout)["runs"]] == ["CANCELLED"]
    with open_log(url) as log:
        events = [i.event for i in log.read()]
    cancelled = next(n for n, e in enumerate(events) if isinstance(e, JobRunCancelled))
    assert not [e for e in events[cancelled:] if isinstance(e, TaskEvent)], "a task event after the cancellation"
    assert published_records(tmp_path / "published") == {}
