"""The job lock on every store: a live holder refuses a second run, naming it; a dead one (SIGKILLed) is taken
over, and so is a live one with `take_over`; the lock says whom it took the lock from and how that run ended."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from events.log.kafka.store import KafkaLog
from events.log.lock import LEASE_S, Claim, HolderStatus, JobLockedError, LeaseJobLock, RunEnd
from tests.log_fixtures import LogFactory

ROOT = Path(__file__).parents[3]
HOLD = """
import sys, time
from events.log import open_log
url, job, run_id = sys.argv[1:]
with open_log(url) as log:
    lock = log.job_lock(job)
    print(lock.acquire(run_id), flush=True)
    time.sleep(300)
"""
"""A real process that takes a job's lock and keeps it until killed."""


def hold(url: str, job: str, run_id: str) -> subprocess.Popen[str]:
    """Start a process holding the job's lock for run_id; returns once it holds it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, url, job, run_id], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, f"the lock holder did not start: {proc.stderr.read() if proc.stderr else ''}"
    return proc


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_a_live_holder_refuses_a_second_run_naming_it_until_taken_over(log_factory: LogFactory) -> None:
    log = log_factory()
    first = hold(log.url, "orders", "run-1")
    try:
        lock = log.job_lock("orders")
        assert lock.holder_status(f"{first.pid}@{socket.gethostname()}", "run-1") is HolderStatus.ALIVE
        with pytest.raises(JobLockedError) as refused:
            lock.acquire("run-2")
        message = str(refused.value)
        for named in ("run-1", f"pid {first.pid}", f"host {socket.gethostname()}", "since 20", "--take-over"):
            assert named in message, message
        with log.job_lock("orders") as taker:
            taker.acquire("run-2", take_over=True)
            assert taker.displaced is not None and taker.displaced.end is RunEnd.FENCED
            assert taker.displaced.claim.run_id == "run-1"
            assert "fenced" in taker.displaced.reason("run-2")
            holder = f"{first.pid}@{socket.gethostname()}"
            assert log.job_lock("orders").holder_status(holder, "run-1") is HolderStatus.FENCED
            with pytest.raises(JobLockedError, match="run-2"):
                log.job_lock("orders").acquire("run-3")
    finally:
        kill(first)


def test_a_killed_holder_is_taken_over_as_dead_and_a_released_one_is_not_displaced(log_factory: LogFactory) -> None:
    log = log_factory()
    first = hold(log.url, "orders", "run-1")
    kill(first)
    lock = log.job_lock("orders")
    lock.acquire("run-2")
    assert lock.displaced is not None and lock.displaced.end is RunEnd.DEAD
    assert lock.displaced.claim.run_id == "run-1" and "dead" in lock.displaced.reason("run-2")
    lock.release()
    with log.job_lock("orders") as again:
        again.acquire("run-3")
        assert again.displaced is None, "a lock given back leaves no run to record as ended"


@pytest.mark.parametrize("store", ["kafka"])
def test_a_kafka_lease_on_another_host_is_alive_until_it_expires_and_is_renewed(log_factory: LogFactory) -> None:
    log = log_factory()
    lock = log.job_lock("orders")
    assert isinstance(lock, LeaseJobLock)
    now = time.time()
    elsewhere = Claim("run-1", "1@elsewhere.example", "2026-01-01T00:00:00Z", int(now * 1000))
    writer = lock.store.writer("orders")
    writer.put(elsewhere)
    writer.close()
    with pytest.raises(JobLockedError, match="run-1 \\(pid 1 on host elsewhere.example"):
        lock.acquire("run-2")
    later = LeaseJobLock("orders", lock.store, clock=lambda: time.time() + LEASE_S + 1)
    assert later.holder_status("1@elsewhere.example", "run-1") is HolderStatus.DEAD
    beating = LeaseJobLock("orders", lock.store, lease_s=LEASE_S, heartbeat_s=0.2, clock=later.clock)
    beating.acquire("run-2")
    try:
        assert beating.displaced is not None and beating.displaced.end is RunEnd.DEAD
        first = lock.store.latest("orders")
        time.sleep(1.5)
        renewed = lock.store.latest("orders")
        assert first is not None and renewed is not None and renewed.heartbeat_ms > first.heartbeat_ms
    finally:
        beating.release()
    released = lock.store.latest("orders")
    assert released is not None and released.released and released.run_id == "run-2"


@pytest.mark.parametrize("store", ["sqlite"])
def test_recover_is_refused_while_a_run_holds_the_lock(log_factory: LogFactory, tmp_path: Path) -> None:
    """`oncelog recover` opens the job's writer, which would fence a live run: it takes the lock first."""
    from tests.fault.pipeline_checks import write_job

    log = log_factory()
    job = write_job(tmp_path, log.url)
    holder = hold(log.url, "crashy", "run-1")
    try:
        refused = subprocess.run([sys.executable, "-m", "oncelog", "recover", str(job)], cwd=ROOT, capture_output=True,
                                 text=True, timeout=120)
    finally:
        kill(holder)
    assert refused.returncode == 3 and "run-1" in refused.stderr, refused.stderr
    done = subprocess.run([sys.executable, "-m", "oncelog", "recover", str(job)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("store", ["kafka"])
def test_a_kafka_lock_taken_after_ensure_topic_asks_the_cluster_for_no_topic(log_factory: LogFactory,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The locks topic was found or made by ensure_topic a moment ago: asking for it again, three times a run, was a
    metadata round trip each."""
    log = log_factory()
    assert isinstance(log, KafkaLog)
    log.ensure_topic()
    asked: list[str] = []
    describe = log._describe

    def noting(topic: str) -> object:
        asked.append(topic)
        return describe(topic)

    monkeypatch.setattr(log, "_describe", noting)
    lock = log.job_lock("orders")
    lock.acquire("run-1")
    lock.release()
    assert asked == []
