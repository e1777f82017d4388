"""`oncelog state` says what became of a job's lock holder: dead after a SIGKILLed run, alive while a real process
holds the lock, fenced once another run holds it; the store's own job lock decides (SQLite's flock, Kafka's lease:
tests/events/log/test_job_lock.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.job import JobLockAcquired
from events.log import open_log
from oncelog.cli import app
from tests.fault.pipeline_checks import write_job
from tests.fault.soak import kill_session, start_run

ROOT = Path(__file__).parents[3]
SLOW: dict[str, object] = {"source.synthetic.records.per.second": 40}  # seconds of tasks: time to look, then kill
HOLD = """
import sys, time
from events.job import JobLockAcquired
from events.log import open_log
url, job, run_id, record = sys.argv[1:]
with open_log(url) as log:
    lock = log.job_lock(job)
    holder = lock.acquire(run_id)
    if record == "yes":
        log.append([JobLockAcquired(job=job, run_id=run_id, holder=holder)])
    print(holder, flush=True)
    time.sleep(300)
"""
"""A real process that takes a job's lock (recording it in the log, or not) and keeps it until killed."""


def holder_status(url: str, job: str) -> str | None:
    """What `oncelog state --json` says of the job's lock holder."""
    result = CliRunner().invoke(app, ["state", "--log", url, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["jobs"].get(job, {}).get("lock_holder_status")


def hold_lock(url: str, job: str, run_id: str, record: bool) -> subprocess.Popen[str]:
    """Start a process holding the job's lock for run_id; returns once it holds it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, url, job, run_id, "yes" if record else "no"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip(), "the lock holder did not start"
    return proc


def test_a_live_holder_is_alive_then_dead_once_killed_and_fenced_by_another_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    first = hold_lock(url, "orders", "run-1", record=True)
    try:
        assert holder_status(url, "orders") == "alive"
    finally:
        first.kill()
        first.wait()
    assert holder_status(url, "orders") == "dead"
    second = hold_lock(url, "orders", "run-2", record=False)  # holds the lock, not yet recorded in the log
    try:
        assert holder_status(url, "orders") == "fenced"
    finally:
        second.kill()
        second.wait()


def test_a_holder_on_another_host_is_unknown(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    with open_log(url) as log:
        log.append([JobLockAcquired(job="orders", run_id="run-1", holder="1@elsewhere.example")])
    assert holder_status(url, "orders") == "unknown"


@pytest.mark.spark
@pytest.mark.slow  # a real `oncelog run` starts Spark in its own process: about a minute on this machine
def test_state_shows_a_sigkilled_run_as_a_dead_holder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **SLOW)
    proc, _, stderr = start_run(job, tmp_path, "killed")
    deadline = time.monotonic() + 180
    try:
        while not (tmp_path / "events.db").exists() or holder_status(url, "crashy") is None:
            assert proc.poll() is None, stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, "the run took no lock within 180 s"
            time.sleep(0.5)
        assert holder_status(url, "crashy") == "alive"
    finally:
        kill_session(proc)
    assert holder_status(url, "crashy") == "dead"
